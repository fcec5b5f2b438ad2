"""The LCM plugin's settings in the gateway: one model, read once at registration, handed down.

Each variable with its default and rule; a bad value is logged and its default kept, never
raised (the plugin must not stop the gateway that loads it); the HTTP caps are the
entrypoint's own fields (the same names and bounds, ``HttpLimitsEnv``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from hermes_runtime.agent.settings import AgentSettings
from hermes_runtime.common.boundedhttp import HttpLimitsEnv, ServerLimits
from hermes_runtime.common.datadir import DEFAULT_DATA_DIR
from hermes_runtime.common.envsettings import variables
from hermes_runtime.common.modelcache import model_cache_dir
from hermes_runtime.lcm.config import HermesConfigFile, LcmConfig
from hermes_runtime.lcm.embed.e5onnx import OnnxE5Embedder
from hermes_runtime.lcm.embed.embedprocess import ProcessEmbedder
from hermes_runtime.lcm.host.hermes_plugin import LcmContextEngine, register
from hermes_runtime.lcm.host.hostsettings import METRICS_PORT_ENV, PluginHostSettings

LIMITS = {
    "HERMES_RUNTIME_HTTP_MAX_CONNECTIONS": "6",
    "HERMES_RUNTIME_HTTP_MAX_PER_PEER": "0",
    "HERMES_RUNTIME_HTTP_HEAD_SECONDS": "2.5",
}


def events(err: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in err.splitlines() if line.startswith("{")]


def test_defaults_without_any_variable(capsys: pytest.CaptureFixture[str]) -> None:
    settings = PluginHostSettings.from_environ({})
    assert settings.metrics_port is None  # no metrics server
    assert settings.limits == ServerLimits()
    assert settings.model_cache_dir == Path.home() / ".cache" / "hermes-runtime"
    assert settings.data_dir == DEFAULT_DATA_DIR
    assert LcmContextEngine()._shared.settings == settings  # an engine built without ``register``
    assert capsys.readouterr().err == ""


def test_each_variable_sets_its_field(tmp_path: Path) -> None:
    env = {
        METRICS_PORT_ENV: " 9464 ",
        **LIMITS,
        "HERMES_RUNTIME_MODEL_CACHE": str(tmp_path / "image"),
        "XDG_CACHE_HOME": str(tmp_path / "xdg"),
        "HERMES_HOME": f" {tmp_path / 'data'} ",
    }
    settings = PluginHostSettings.from_environ(env)
    assert settings.metrics_port == 9464
    assert settings.limits == ServerLimits(6, 0, 2.5)
    assert settings.model_cache_dir == tmp_path / "image"
    assert settings.data_dir == tmp_path / "data"
    blank = PluginHostSettings.from_environ({**env, "HERMES_RUNTIME_MODEL_CACHE": " "})
    assert blank.model_cache_dir == tmp_path / "xdg" / "hermes-runtime"
    assert PluginHostSettings.from_environ({METRICS_PORT_ENV: ""}).metrics_port is None


def test_the_model_cache_follows_the_rule_every_process_reads(tmp_path: Path) -> None:
    """The gateway's settings and a process without them (the CLI) find the same folder."""
    for env in (
        {},
        {"XDG_CACHE_HOME": str(tmp_path / "xdg")},
        {"XDG_CACHE_HOME": str(tmp_path / "xdg"), "HERMES_RUNTIME_MODEL_CACHE": str(tmp_path)},
    ):
        assert PluginHostSettings.from_environ(env).model_cache_dir == model_cache_dir(env)


@pytest.mark.parametrize("bad", ["ninety", "0", "70000", "9.5"])
def test_a_bad_port_is_logged_and_means_no_server(
    bad: str, capsys: pytest.CaptureFixture[str]
) -> None:
    settings = PluginHostSettings.from_environ({METRICS_PORT_ENV: bad, **LIMITS})
    assert settings.metrics_port is None
    assert settings.limits == ServerLimits(6, 0, 2.5)  # the other variables still apply
    (logged,) = events(capsys.readouterr().err)
    assert logged["event"] == "lcm.metrics.unavailable" and logged["port"] == bad
    assert METRICS_PORT_ENV in logged["error"]


@pytest.mark.parametrize(
    ("variable", "bad"),
    [
        ("HERMES_RUNTIME_HTTP_MAX_CONNECTIONS", "0"),
        ("HERMES_RUNTIME_HTTP_MAX_PER_PEER", "-1"),
        ("HERMES_RUNTIME_HTTP_HEAD_SECONDS", "0.1"),
        ("HERMES_RUNTIME_HTTP_HEAD_SECONDS", "inf"),
        ("HERMES_RUNTIME_HTTP_MAX_CONNECTIONS", "many"),
    ],
)
def test_a_bad_cap_is_logged_and_every_cap_keeps_its_default(
    variable: str, bad: str, capsys: pytest.CaptureFixture[str]
) -> None:
    env = {METRICS_PORT_ENV: "9464", **LIMITS, variable: bad}
    settings = PluginHostSettings.from_environ(env)
    assert settings.limits == ServerLimits()
    assert settings.metrics_port == 9464  # the port is still served
    (logged,) = events(capsys.readouterr().err)
    assert logged["event"] == "http.limits.refused" and logged["level"] == "warning"


def test_a_bad_port_and_a_bad_cap_are_both_logged(capsys: pytest.CaptureFixture[str]) -> None:
    env = {METRICS_PORT_ENV: "x", "HERMES_RUNTIME_HTTP_MAX_CONNECTIONS": "0"}
    settings = PluginHostSettings.from_environ(env)
    assert settings.metrics_port is None and settings.limits == ServerLimits()
    logged = {e["event"] for e in events(capsys.readouterr().err)}
    assert logged == {"lcm.metrics.unavailable", "http.limits.refused"}


def test_the_caps_are_the_entrypoints_own_variables() -> None:
    """Composed, not copied: the same names (and so the same bounds) as the entrypoint's."""
    caps = set(variables(HttpLimitsEnv))
    assert caps <= set(variables(PluginHostSettings)) and caps <= set(variables(AgentSettings))
    assert set(variables(PluginHostSettings)) == caps | {
        METRICS_PORT_ENV,
        "HERMES_RUNTIME_MODEL_CACHE",
        "XDG_CACHE_HOME",
        "HERMES_HOME",
    }


def test_the_settings_are_frozen() -> None:
    settings = PluginHostSettings.from_environ({})
    with pytest.raises(ValueError, match="frozen"):
        settings.metrics_port = 1  # type: ignore[misc]


class Ctx:
    """What ``register`` calls on Hermes' plugin context, nothing more."""

    engine: Any = None

    def register_context_engine(self, engine: Any) -> None:
        self.engine = engine

    def register_hook(self, name: str, callback: Any) -> None:
        pass


def test_register_reads_the_environment_once_and_copies_share_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(METRICS_PORT_ENV, "9464")
    monkeypatch.setenv("HERMES_RUNTIME_MODEL_CACHE", str(tmp_path))

    ctx = Ctx()
    register(ctx)
    settings = ctx.engine._shared.settings
    assert settings.metrics_port == 9464 and settings.model_cache_dir == tmp_path
    monkeypatch.setenv(METRICS_PORT_ENV, "9465")  # read at registration, not later
    assert ctx.engine._shared.settings.metrics_port == 9464


def test_register_reads_config_yaml_once_for_every_question_of_the_start(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The expander, the static model's warm-up, the open at start and the engine's own
    settings all answer from one reading: a file edited later applies at the next start."""
    home = tmp_path / "home"
    home.mkdir()
    config_yaml = home / "config.yaml"
    config_yaml.write_text("context:\n  engine: lcm\nlcm:\n  embeddings: 'off'\n")
    monkeypatch.setenv("HERMES_HOME", str(home))
    monkeypatch.setenv(METRICS_PORT_ENV, "0")
    reads: list[Path] = []
    read = HermesConfigFile.read

    def counted(home: Path) -> HermesConfigFile:
        reads.append(home)
        return read(home)

    monkeypatch.setattr(HermesConfigFile, "read", counted)

    ctx = Ctx()
    register(ctx)
    config_yaml.write_text("context:\n  engine: lcm\nlcm:\n  embeddings: nope\n")
    engine = ctx.engine._shared.engine()
    try:
        assert reads == [home]
        assert engine.config.embeddings == "off" and engine.embedder is None
    finally:
        engine.close()


def test_the_engine_embeds_with_the_settings_model_cache(tmp_path: Path) -> None:
    """The gateway's e5 finds its graph in the folder the settings name, not elsewhere, and
    runs in a process of its own."""
    settings = PluginHostSettings(model_cache=tmp_path / "models")
    engine = LcmContextEngine(LcmConfig.for_home(tmp_path), settings=settings)
    try:
        embedder = engine.engine.embedder
        assert isinstance(embedder, ProcessEmbedder)
        assert (embedder.name, embedder.cache_dir) == ("e5", tmp_path / "models")
        assert embedder.model == OnnxE5Embedder(cache_dir=tmp_path).model
    finally:
        engine.engine.close()
