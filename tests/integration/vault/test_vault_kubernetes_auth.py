"""Kubernetes auth against OpenBao's real kubernetes method (no cluster in this suite).

Without a cluster, OpenBao cannot complete a TokenReview, so these tests
cover what the CLI controls: it reads the projected token file, sends the
role to the right auth path, checks the audience, and every refusal names
the role and auth path. The full login is covered by the e2e suite.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path

from vault_testlib import SeededVault, run_vault_cli

SPEC = ["--secret", "kv1/hermes#AWS_SECRET_ACCESS_KEY=AWS"]


def fake_sa_jwt(namespace: str, name: str, audience: str) -> str:
    """An unsigned token with ServiceAccount claims (OpenBao checks them before TokenReview)."""

    def part(obj: dict[str, object]) -> str:
        return base64.urlsafe_b64encode(json.dumps(obj).encode()).rstrip(b"=").decode()

    claims = {
        "iss": "kubernetes/serviceaccount",
        "aud": [audience],
        "sub": f"system:serviceaccount:{namespace}:{name}",
        "kubernetes.io/serviceaccount/namespace": namespace,
        "kubernetes.io/serviceaccount/service-account.name": name,
    }
    return f"{part({'alg': 'RS256'})}.{part(claims)}.c2lnbmF0dXJl"


def kube_args(vault: SeededVault, jwt_file: Path, role: str, *extra: str) -> list[str]:
    return [
        "render",
        "--addr",
        vault.addr,
        "--auth",
        "kubernetes",
        "--role",
        role,
        "--jwt-file",
        str(jwt_file),
        *extra,
        *SPEC,
        "--out",
        str(jwt_file.parent / "env"),
    ]


def test_unknown_role_is_refused_naming_role_and_auth_path(
    vault: SeededVault, tmp_path: Path
) -> None:
    jwt_file = tmp_path / "token"
    jwt_file.write_text(fake_sa_jwt("agents", "hermes", "vault"))
    run = run_vault_cli(*kube_args(vault, jwt_file, "no-such-role"))
    assert run.returncode == 1
    assert "role 'no-such-role'" in run.stderr
    assert "auth/kubernetes" in run.stderr
    assert "invalid role name" in run.stderr  # OpenBao's own answer is passed on
    assert not (tmp_path / "env").exists()


def test_service_account_not_bound_to_the_role_is_refused(
    vault: SeededVault, tmp_path: Path
) -> None:
    jwt_file = tmp_path / "token"
    jwt_file.write_text(fake_sa_jwt("agents", "intruder", "vault"))
    run = run_vault_cli(*kube_args(vault, jwt_file, "hermes"))
    assert run.returncode == 1
    assert "role 'hermes'" in run.stderr
    assert "not authorized" in run.stderr


def test_custom_auth_path_is_used(vault: SeededVault, tmp_path: Path) -> None:
    jwt_file = tmp_path / "token"
    jwt_file.write_text(fake_sa_jwt("agents", "hermes", "vault"))
    run = run_vault_cli(*kube_args(vault, jwt_file, "hermes", "--auth-path", "k8s-prod"))
    assert run.returncode == 1
    assert "auth/k8s-prod" in run.stderr


def test_bound_service_account_reaches_the_token_review(vault: SeededVault, tmp_path: Path) -> None:
    """Role and claims match, so OpenBao calls TokenReview, which is unreachable here."""
    jwt_file = tmp_path / "token"
    jwt_file.write_text(fake_sa_jwt("agents", "hermes", "vault"))
    run = run_vault_cli(*kube_args(vault, jwt_file, "hermes", "--audience", "vault"))
    assert run.returncode == 1
    assert "role 'hermes'" in run.stderr and "auth/kubernetes" in run.stderr
    assert "not authorized" not in run.stderr and "invalid role" not in run.stderr


def test_missing_token_file_is_named(vault: SeededVault, tmp_path: Path) -> None:
    run = run_vault_cli(*kube_args(vault, tmp_path / "absent-token", "hermes"))
    assert run.returncode == 1
    assert f"{tmp_path / 'absent-token'} does not exist" in run.stderr


def test_audience_mismatch_is_caught_before_login(vault: SeededVault, tmp_path: Path) -> None:
    jwt_file = tmp_path / "token"
    jwt_file.write_text(fake_sa_jwt("agents", "hermes", "https://kubernetes.default.svc"))
    run = run_vault_cli(*kube_args(vault, jwt_file, "hermes", "--audience", "vault"))
    assert run.returncode == 1
    assert "'vault'" in run.stderr and "--audience" in run.stderr
    assert str(jwt_file) in run.stderr


def test_kubernetes_auth_without_role_is_a_usage_error(vault: SeededVault, tmp_path: Path) -> None:
    run = run_vault_cli("render", "--addr", vault.addr, "--auth", "kubernetes", *SPEC, "--out", "x")
    assert run.returncode == 2
    assert "--role" in run.stderr
