"""`secrets ensure`'s inputs: names checked as Kubernetes checks them, no cluster needed.

Creating and keeping the Secrets runs against a real API server in the e2e tier
(tests/e2e/test_gitops.py); which existing Secret is kept, test_clustersecrets_ownership.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from hermes_runtime.cli import main
from hermes_runtime.clustersecrets import GeneratedSecret, InClusterApi, parse_generated
from hermes_runtime.common.errors import RuntimeFailure


def test_a_secret_and_its_key_are_parsed() -> None:
    assert parse_generated("hermes-api/api-key") == GeneratedSecret("hermes-api", "api-key")
    assert parse_generated("a.b/RESTIC_PASSWORD") == GeneratedSecret("a.b", "RESTIC_PASSWORD")


@pytest.mark.parametrize("text", ["no-slash", "Upper/key", "-x/key", "name/", "/key", "n/k/k"])
def test_a_bad_name_or_key_is_refused_naming_it(text: str) -> None:
    with pytest.raises(RuntimeFailure, match="NAME/KEY") as exc:
        parse_generated(text)
    assert repr(text) in str(exc.value)


def test_outside_a_pod_the_command_says_where_it_runs(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    assert main(["secrets", "ensure", "--secret", "x/y"]) == 1
    assert "KUBERNETES_SERVICE_HOST" in capsys.readouterr().err


def test_a_missing_token_file_is_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.96.0.1")
    with pytest.raises(RuntimeFailure, match="automountServiceAccountToken") as exc:
        InClusterApi.from_service_account(tmp_path)
    assert str(tmp_path / "token") in str(exc.value)


def test_a_bad_label_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["secrets", "ensure", "--secret", "x/y", "--label", "novalue"])
    assert exit_info.value.code == 2
    assert "--label 'novalue' is not KEY=VALUE" in capsys.readouterr().err


def test_only_a_secret_the_command_would_create_can_be_adopted(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["secrets", "ensure", "--secret", "a/k", "--secret", "b/k", "--adopt", "c"])
    assert exit_info.value.code == 2
    assert "--adopt c: not the NAME of a --secret (a, b)" in capsys.readouterr().err


def test_an_adopted_name_is_accepted_and_the_command_still_needs_its_pod(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    assert main(["secrets", "ensure", "--secret", "a/k", "--adopt", "a"]) == 1
    assert "KUBERNETES_SERVICE_HOST" in capsys.readouterr().err


def test_the_api_servers_address_comes_from_the_kubelets_variables(tmp_path: Path) -> None:
    (tmp_path / "token").write_text("t0k3n\n")
    (tmp_path / "namespace").write_text("team-a\n")
    env = {"KUBERNETES_SERVICE_HOST": "fd00::1", "KUBERNETES_SERVICE_PORT": "6443"}
    api = InClusterApi.from_service_account(tmp_path, env)
    assert (api.base_url, api.namespace, api.token) == ("https://[fd00::1]:6443", "team-a", "t0k3n")
    host_only = InClusterApi.from_service_account(tmp_path, {"KUBERNETES_SERVICE_HOST": "10.0.0.1"})
    assert host_only.base_url == "https://10.0.0.1:443"
    with pytest.raises(RuntimeFailure, match="KUBERNETES_SERVICE_PORT='https': not a TCP port"):
        InClusterApi.from_service_account(tmp_path, {**env, "KUBERNETES_SERVICE_PORT": "https"})
