"""Leased dynamic secrets: renewed while Vault allows, re-read only at max TTL.

Uses OpenBao's real database engine with its built-in Redis plugin and a real
``redis-server`` (Debian package), so the credentials in the env file are
checked against the database: a lease the refresher failed to renew would be
revoked by OpenBao, which deletes the Redis user.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.net import free_port
from support.wait import wait_until
from vault_testlib import SeededVault, event_names, file_value, refresher

from hermes_runtime.vault import VaultSettings

ADMIN_PASSWORD = "redis-admin-pw"


def redis_command(port: int, *words: str) -> bytes:
    """Send one RESP command on a fresh connection and return the first reply line."""
    payload = f"*{len(words)}\r\n".encode()
    for word in words:
        data = word.encode()
        payload += b"$%d\r\n%s\r\n" % (len(data), data)
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(payload)
        return sock.recv(4096).split(b"\r\n", 1)[0]


def redis_accepts(port: int, user: str | None, password: str | None) -> bool:
    return (
        user is not None
        and password is not None
        and redis_command(port, "AUTH", user, password) == b"+OK"
    )


@pytest.fixture(scope="module")
def redis_port() -> Iterator[int]:
    binary = shutil.which("redis-server")
    if binary is None:
        raise AssertionError(
            "redis-server is required: apt-get install redis-server (ci/install-system-deps.sh)"
        )
    port = free_port()
    with tempfile.TemporaryDirectory(prefix="redis-") as workdir:
        process = subprocess.Popen(
            [binary, "--port", str(port), "--bind", "127.0.0.1", "--requirepass", ADMIN_PASSWORD,
             "--save", "", "--appendonly", "no", "--dir", workdir],
            stdout=subprocess.DEVNULL,
        )  # fmt: skip
        try:
            wait_until(lambda: _answers(port), timeout=10, what="redis-server")
            yield port
        finally:
            process.terminate()
            process.wait(timeout=10)


def _answers(port: int) -> bool:
    try:
        return redis_command(port, "PING").startswith((b"+PONG", b"-NOAUTH"))
    except OSError:
        return False


def leases_of(vault: SeededVault, role: str) -> list[str]:
    listed = vault.server.client().list(f"sys/leases/lookup/database/creds/{role}")
    return list(listed["data"]["keys"]) if listed else []


def test_dynamic_credentials_are_renewed_not_reminted(
    vault: SeededVault, redis_port: int, tmp_path: Path
) -> None:
    root = vault.server.client()
    root.sys.enable_secrets_engine("database")
    root.write(
        "database/config/redis",
        plugin_name="redis-database-plugin",
        host="127.0.0.1",
        port=redis_port,
        username="default",
        password=ADMIN_PASSWORD,
        allowed_roles="hermes",
    )
    root.write(
        "database/roles/hermes",
        db_name="redis",
        creation_statements='["+@read"]',
        default_ttl="4s",
        max_ttl="8s",
    )
    out = tmp_path / "env"
    settings = VaultSettings(addr=vault.addr, auth="token")
    specs = [
        "database/creds/hermes#username=REDIS_USER",
        "database/creds/hermes#password=REDIS_PASSWORD",
    ]
    with refresher(settings, specs, out, {"VAULT_TOKEN": vault.server.root_token}) as log:
        first_user = file_value(out, "REDIS_USER")
        assert redis_accepts(redis_port, first_user, file_value(out, "REDIS_PASSWORD"))
        time.sleep(5.5)  # past the 4 s lease: only a renewal keeps the user alive
        assert file_value(out, "REDIS_USER") == first_user
        assert redis_accepts(redis_port, first_user, file_value(out, "REDIS_PASSWORD"))
        assert len(leases_of(vault, "hermes")) == 1, "credentials must not be minted on every tick"
        wait_until(
            lambda: file_value(out, "REDIS_USER") != first_user,
            timeout=10,
            what="new credentials at max TTL",
        )
        assert redis_accepts(
            redis_port, file_value(out, "REDIS_USER"), file_value(out, "REDIS_PASSWORD")
        )
    assert "vault.refresh.failed" not in log.getvalue()
    names = event_names(log)
    assert "vault.lease.renewed" in names and "vault.lease.reread" in names
