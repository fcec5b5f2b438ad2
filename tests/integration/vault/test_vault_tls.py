"""`--ca-cert` against an OpenBao dev server speaking HTTPS with its own CA."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from support.openbao import OpenBaoServer, openbao_dev_server
from vault_testlib import run_vault_cli

from hermes_runtime.vault import read_env_file


@pytest.fixture(scope="module")
def tls_vault() -> Iterator[OpenBaoServer]:
    with openbao_dev_server(tls=True) as server:
        server.client().secrets.kv.v2.create_or_update_secret(
            path="hermes", secret={"KEY": "tls-value"}, mount_point="secret"
        )
        yield server


def render_args(server: OpenBaoServer, out: Path, *extra: str) -> list[str]:
    return [
        "render", "--addr", server.addr, "--auth", "token",
        "--secret", "secret/data/hermes#KEY=K", "--out", str(out), *extra,
    ]  # fmt: skip


def test_ca_cert_verifies_the_server(tls_vault: OpenBaoServer, tmp_path: Path) -> None:
    assert tls_vault.ca_cert is not None
    out = tmp_path / "env"
    run = run_vault_cli(
        *render_args(tls_vault, out, "--ca-cert", str(tls_vault.ca_cert)),
        env={"VAULT_TOKEN": "root"},
    )
    assert run.returncode == 0, run.stderr
    assert read_env_file(out) == {"K": "tls-value"}


def test_unknown_ca_fails_naming_the_address_and_option(
    tls_vault: OpenBaoServer, tmp_path: Path
) -> None:
    run = run_vault_cli(*render_args(tls_vault, tmp_path / "env"), env={"VAULT_TOKEN": "root"})
    assert run.returncode == 1
    assert f"TLS verification failed for Vault at {tls_vault.addr}" in run.stderr
    assert "--ca-cert" in run.stderr
    assert not (tmp_path / "env").exists()


def test_missing_ca_file_is_named(tls_vault: OpenBaoServer, tmp_path: Path) -> None:
    missing = tmp_path / "no-ca.pem"
    run = run_vault_cli(
        *render_args(tls_vault, tmp_path / "env", "--ca-cert", str(missing)),
        env={"VAULT_TOKEN": "root"},
    )
    assert run.returncode == 1
    assert f"--ca-cert file {missing} does not exist" in run.stderr
