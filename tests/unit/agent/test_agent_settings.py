"""Settings from the chart's env, and the gateway's environment (API server, secrets)."""

from __future__ import annotations

from pathlib import Path

import pytest

from hermes_runtime.agent import AgentSettings
from hermes_runtime.agent.gateway import gateway_env
from hermes_runtime.common.errors import RuntimeFailure

KEY = "k" * 32


def test_defaults_match_the_image_contract() -> None:
    settings = AgentSettings.from_environ({})
    assert settings.data_dir == Path("/opt/data")
    assert settings.metrics_port == 9090
    assert settings.api_port == 8642
    assert settings.api_host == "0.0.0.0"
    assert settings.plugin_spec is None
    assert settings.home_dir == Path("/opt/data/home")


def test_env_overrides_and_empty_values_mean_default() -> None:
    settings = AgentSettings.from_environ(
        {
            "HERMES_HOME": "/data",
            "HERMES_RUNTIME_PLUGIN_SPEC": "/etc/p.yaml",
            "HERMES_RUNTIME_SECRETS_ENV": "",
            "HERMES_RUNTIME_METRICS_PORT": "9191",
            "API_SERVER_PORT": " ",
        }
    )
    assert settings.data_dir == Path("/data")
    assert settings.plugin_spec == Path("/etc/p.yaml")
    assert settings.secrets_env is None
    assert settings.metrics_port == 9191
    assert settings.api_port == 8642


@pytest.mark.parametrize("value", ["http", "-1", "70000"])
def test_a_bad_port_names_the_variable(value: str) -> None:
    with pytest.raises(RuntimeFailure, match="HERMES_RUNTIME_METRICS_PORT"):
        AgentSettings.from_environ({"HERMES_RUNTIME_METRICS_PORT": value})


def test_gateway_env_enables_the_api_server_and_loads_secrets(tmp_path: Path) -> None:
    secrets = tmp_path / "env"
    secrets.write_text(f"API_SERVER_KEY={KEY}\nOPENAI_API_KEY=from-vault\n")
    settings = AgentSettings(data_dir=tmp_path, secrets_env=secrets, api_port=9999)
    env = gateway_env(settings, base={"OPENAI_API_KEY": "stale", "PATH": "/bin"})
    assert env["API_SERVER_ENABLED"] == "true"
    # Behind the front door (which owns port 9999) the gateway listens on loopback only.
    assert (env["API_SERVER_HOST"], env["API_SERVER_PORT"]) == ("127.0.0.1", "18642")
    assert env["API_SERVER_KEY"] == KEY
    assert env["OPENAI_API_KEY"] == "from-vault"  # the rendered file wins over stale env
    assert env["HERMES_HOME"] == str(tmp_path)
    assert env["HERMES_GATEWAY_EXTERNAL_SUPERVISOR"] == "1"
    assert env["PATH"] == "/bin"


def test_without_the_front_door_the_gateway_owns_the_api_port(tmp_path: Path) -> None:
    settings = AgentSettings.from_environ(
        {
            "HERMES_HOME": str(tmp_path),
            "API_SERVER_PORT": "9999",
            "HERMES_RUNTIME_GATEWAY_PORT": "0",
        }
    )
    env = gateway_env(settings, base={"API_SERVER_KEY": KEY})
    assert not settings.front_door
    assert (env["API_SERVER_HOST"], env["API_SERVER_PORT"]) == ("0.0.0.0", "9999")


def test_the_key_may_live_in_hermes_own_dotenv(tmp_path: Path) -> None:
    (tmp_path / ".env").write_text(f"# keys\nexport API_SERVER_KEY='{KEY}'\n")
    env = gateway_env(AgentSettings(data_dir=tmp_path), base={})
    assert "API_SERVER_KEY" not in env  # Hermes reads its .env itself


def test_a_missing_key_is_refused_naming_where_to_put_it(tmp_path: Path) -> None:
    secrets = tmp_path / "env"
    secrets.write_text("OTHER=1\n")
    settings = AgentSettings(data_dir=tmp_path, secrets_env=secrets)
    with pytest.raises(RuntimeFailure, match="API_SERVER_KEY is not set") as exc:
        gateway_env(settings, base={})
    assert str(secrets) in str(exc.value)
    assert str(tmp_path / ".env") in str(exc.value)


def test_a_short_key_is_refused_without_echoing_it(tmp_path: Path) -> None:
    with pytest.raises(RuntimeFailure, match="shorter than 16") as exc:
        gateway_env(AgentSettings(data_dir=tmp_path), base={"API_SERVER_KEY": "short-secret"})
    assert "short-secret" not in str(exc.value)


def test_a_missing_secrets_file_names_the_file(tmp_path: Path) -> None:
    settings = AgentSettings(data_dir=tmp_path, secrets_env=tmp_path / "nope.env")
    with pytest.raises(RuntimeFailure, match=r"nope\.env"):
        gateway_env(settings, base={"API_SERVER_KEY": KEY})


def test_hermes_respawn_storm_breaker_is_off_unless_the_operator_set_it(tmp_path: Path) -> None:
    """Every hand-over and restart is a gateway start on the same volume: Hermes' breaker
    would sleep 10 s, 20 s ... before binding from the 6th start in 120 s on."""
    settings = AgentSettings(data_dir=tmp_path)
    assert gateway_env(settings, base={"API_SERVER_KEY": KEY})["HERMES_GATEWAY_MAX_STARTS"] == "0"
    mine = gateway_env(settings, base={"API_SERVER_KEY": KEY, "HERMES_GATEWAY_MAX_STARTS": "9"})
    assert mine["HERMES_GATEWAY_MAX_STARTS"] == "9"


def test_the_idempotency_ttl_defaults_to_hermes_own_and_can_be_set_or_turned_off() -> None:
    assert AgentSettings.from_environ({}).idempotency_ttl == 300.0
    env = {"HERMES_RUNTIME_IDEMPOTENCY_TTL_SECONDS": "90"}
    assert AgentSettings.from_environ(env).idempotency_ttl == 90.0
    env = {"HERMES_RUNTIME_IDEMPOTENCY_TTL_SECONDS": "0"}
    assert AgentSettings.from_environ(env).idempotency_ttl == 0.0
    with pytest.raises(RuntimeFailure, match="HERMES_RUNTIME_IDEMPOTENCY_TTL_SECONDS"):
        AgentSettings.from_environ({"HERMES_RUNTIME_IDEMPOTENCY_TTL_SECONDS": "-5"})


def test_the_control_socket_front_door_cap_and_abandon_time_come_from_the_env() -> None:
    default = AgentSettings.from_environ({})
    assert default.control_socket == Path("/run/hermes-runtime/agent.sock")
    assert default.front_door_max_held == 256
    assert default.abandon_seconds == 40  # Kubernetes' default grace period (30 s) + 10 s
    given = AgentSettings.from_environ(
        {
            "HERMES_RUNTIME_CONTROL_SOCKET": "/run/x/agent.sock",
            "HERMES_RUNTIME_FRONT_DOOR_MAX_HELD": "32",
            "HERMES_RUNTIME_TERMINATION_GRACE_SECONDS": "60",
        }
    )
    assert given.control_socket == Path("/run/x/agent.sock")
    assert given.front_door_max_held == 32
    assert given.abandon_seconds == 70


@pytest.mark.parametrize("value", ["0", "-3", "many", "1.5", "100001"])
def test_a_bad_front_door_cap_names_the_variable(value: str) -> None:
    with pytest.raises(RuntimeFailure, match="HERMES_RUNTIME_FRONT_DOOR_MAX_HELD"):
        AgentSettings.from_environ({"HERMES_RUNTIME_FRONT_DOOR_MAX_HELD": value})


def test_the_data_volume_reserve_comes_from_the_env() -> None:
    assert AgentSettings.from_environ({}).data_min_free_bytes == 64 << 20
    given = AgentSettings.from_environ({"HERMES_RUNTIME_DATA_MIN_FREE_MIB": "8"})
    assert given.data_min_free_mib == 8 and given.data_min_free_bytes == 8 << 20
    assert (
        AgentSettings.from_environ({"HERMES_RUNTIME_DATA_MIN_FREE_MIB": "0"}).data_min_free_mib == 0
    )


@pytest.mark.parametrize("value", ["-1", "lots", "1.5", "1048577"])
def test_a_bad_data_volume_reserve_names_the_variable(value: str) -> None:
    with pytest.raises(RuntimeFailure, match="HERMES_RUNTIME_DATA_MIN_FREE_MIB"):
        AgentSettings.from_environ({"HERMES_RUNTIME_DATA_MIN_FREE_MIB": value})


def test_the_api_key_file_wins_over_the_env_and_vault_wins_over_it(tmp_path: Path) -> None:
    """The chart mounts the API key's Secret as a file (HERMES_RUNTIME_API_KEY_FILE): the
    kubelet updates it in place, so a new key needs no new pod; a Vault-rendered key wins."""
    key_file = tmp_path / "api-key"
    key_file.write_text(KEY + "-from-file\n")
    settings = AgentSettings(data_dir=tmp_path, api_key_file=key_file)
    assert gateway_env(settings, base={"API_SERVER_KEY": KEY})["API_SERVER_KEY"] == (
        KEY + "-from-file"
    )
    vault = tmp_path / "env"
    vault.write_text(f"API_SERVER_KEY={KEY}-from-vault\n")
    both = AgentSettings(data_dir=tmp_path, api_key_file=key_file, secrets_env=vault)
    assert gateway_env(both, base={})["API_SERVER_KEY"] == KEY + "-from-vault"
    from_env = AgentSettings.from_environ({"HERMES_RUNTIME_API_KEY_FILE": str(key_file)})
    assert from_env.api_key_file == key_file


@pytest.mark.parametrize("content", [None, "", "  \n"])
def test_a_missing_or_empty_api_key_file_is_named(tmp_path: Path, content: str | None) -> None:
    key_file = tmp_path / "api-key"
    if content is not None:
        key_file.write_text(content)
    settings = AgentSettings(data_dir=tmp_path, api_key_file=key_file)
    with pytest.raises(RuntimeFailure, match="HERMES_RUNTIME_API_KEY_FILE") as exc:
        gateway_env(settings, base={"API_SERVER_KEY": KEY})
    assert str(key_file) in str(exc.value)
