"""The CLI's defaults from the environment: one model, read when a verb needs them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hermes_runtime.cli import main
from hermes_runtime.cli.settings import CliSettings
from hermes_runtime.common.errors import RuntimeFailure


def test_defaults_without_any_variable() -> None:
    settings = CliSettings.from_environ({})
    assert settings.data_dir == Path("/opt/data")
    assert settings.plugin_spec == Path("/etc/hermes-runtime/plugins.yaml")
    assert not settings.debug and not settings.vault_token_given
    assert settings.agent is None and settings.vault_ca_cert is None


@pytest.mark.parametrize(
    ("value", "on"), [("1", True), (" TRUE ", True), ("yes", True), ("0", False), ("no", False)]
)
def test_debug_is_on_for_one_true_or_yes(value: str, on: bool) -> None:
    assert CliSettings.from_environ({"HERMES_RUNTIME_DEBUG": value}).debug is on


def test_a_token_is_noted_as_given_never_kept() -> None:
    settings = CliSettings.from_environ({"VAULT_TOKEN": "hvs.secret-token"})
    assert settings.vault_token_given is True
    assert "hvs.secret-token" not in repr(settings)


def test_the_first_endpoint_set_wins_and_a_bad_one_names_its_variable() -> None:
    both = {"AWS_ENDPOINT_URL_S3": "http://s3:9000/", "AWS_ENDPOINT_URL": "http://other"}
    assert CliSettings.from_environ(both).url("s3_endpoint_s3", "s3_endpoint") == "http://s3:9000"
    fallback = CliSettings.from_environ({"AWS_ENDPOINT_URL": "https://minio"})
    assert fallback.url("s3_endpoint_s3", "s3_endpoint") == "https://minio"
    bad = CliSettings.from_environ({"VAULT_ADDR": "vault:8200"})
    with pytest.raises(RuntimeFailure, match="VAULT_ADDR='vault:8200': expected an http"):
        bad.url("vault_addr")


def test_the_plugin_spec_default_comes_from_the_environment(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Read when the parser is built: a spec named by the variable is the one linked."""
    spec = tmp_path / "missing.yaml"
    monkeypatch.setenv("HERMES_RUNTIME_PLUGIN_SPEC", str(spec))
    code = main(["plugins", "link", "--data-dir", str(tmp_path)])
    assert code == 1
    assert str(spec) in capsys.readouterr().err


def test_the_model_cache_is_the_gateways_rule_read_by_the_clis_settings() -> None:
    """The CLI finds e5's graph where the gateway does: one rule (``ModelCacheEnv``), read
    into the CLI's settings and handed to the embedder by the verbs."""
    assert CliSettings.from_environ(
        {"HERMES_RUNTIME_MODEL_CACHE": "/models", "XDG_CACHE_HOME": "/xdg"}
    ).model_cache_dir == Path("/models")
    assert CliSettings.from_environ({"XDG_CACHE_HOME": "/xdg"}).model_cache_dir == Path(
        "/xdg/hermes-runtime"
    )
    blank = CliSettings.from_environ({"HERMES_RUNTIME_MODEL_CACHE": " ", "XDG_CACHE_HOME": "/x"})
    assert blank.model_cache_dir == Path("/x/hermes-runtime")


def test_build_model_builds_both_graphs_where_the_settings_say(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The images' build step: both weight widths' graphs in the model cache the environment
    names; a folder that cannot hold them fails naming it."""
    monkeypatch.setenv("HERMES_RUNTIME_MODEL_CACHE", str(tmp_path / "models"))
    assert main(["lcm", "build-model", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    files = [Path(f) for f in report["files"]]
    assert report["model_cache"] == str(tmp_path / "models") and len(files) == 2
    assert all(f.parent == tmp_path / "models" and f.stat().st_size > 1 << 20 for f in files)
    blocked = tmp_path / "a-file"
    blocked.write_text("not a folder")
    assert main(["lcm", "build-model", "--model-cache", str(blocked)]) == 1
    assert f"model cache {blocked}: not writable" in capsys.readouterr().err
