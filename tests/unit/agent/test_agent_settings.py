"""Settings from the chart's env, and the gateway's environment (API server, secrets)."""

from __future__ import annotations

from pathlib import Path

import pytest

from hermes_runtime.agent import AgentSettings
from hermes_runtime.agent.gateway import gateway_env
from hermes_runtime.common.errors import RuntimeFailure

KEY = "k" * 32


def test_defaults_match_the_image_contract() -> None:
    settings = AgentSettings.from_env({})
    assert settings.data_dir == Path("/opt/data")
    assert settings.metrics_port == 9090
    assert settings.api_port == 8642
    assert settings.api_host == "0.0.0.0"
    assert settings.plugin_spec is None
    assert settings.home_dir == Path("/opt/data/home")


def test_env_overrides_and_empty_values_mean_default() -> None:
    settings = AgentSettings.from_env(
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
        AgentSettings.from_env({"HERMES_RUNTIME_METRICS_PORT": value})


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
    settings = AgentSettings.from_env(
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
    assert AgentSettings.from_env({}).idempotency_ttl == 300.0
    env = {"HERMES_RUNTIME_IDEMPOTENCY_TTL_SECONDS": "90"}
    assert AgentSettings.from_env(env).idempotency_ttl == 90.0
    env = {"HERMES_RUNTIME_IDEMPOTENCY_TTL_SECONDS": "0"}
    assert AgentSettings.from_env(env).idempotency_ttl == 0.0
    with pytest.raises(RuntimeFailure, match="HERMES_RUNTIME_IDEMPOTENCY_TTL_SECONDS"):
        AgentSettings.from_env({"HERMES_RUNTIME_IDEMPOTENCY_TTL_SECONDS": "-5"})
