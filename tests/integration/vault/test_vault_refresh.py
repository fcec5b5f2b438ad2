"""`vault render --refresh`: rotation, token renewal, re-login and outages, on a real OpenBao."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import hvac
from support.openbao import OpenBaoServer, openbao_dev_server
from support.wait import wait_until
from vault_testlib import (
    INTERVAL,
    SeededVault,
    assert_no_secret_leaked,
    event_names,
    events,
    file_value,
    refresher,
)

from hermes_runtime.vault import VaultSettings, read_env_file


def put_kv2(client: hvac.Client, name: str, **values: str) -> None:
    client.secrets.kv.v2.create_or_update_secret(path=name, secret=values, mount_point="secret")


def test_rotation_is_rendered_and_unchanged_values_do_not_rewrite(
    vault: SeededVault, tmp_path: Path
) -> None:
    name = f"rotate-{uuid.uuid4().hex[:8]}"
    first, second = f"v1-{uuid.uuid4()}", f"v2-{uuid.uuid4()}"
    put_kv2(vault.server.client(), name, KEY=first, OTHER="stable")
    out = tmp_path / "env"
    settings = VaultSettings(addr=vault.addr, auth="token")
    specs = [f"secret/data/{name}#KEY=ROTATING", f"secret/data/{name}#OTHER=STABLE"]
    with refresher(settings, specs, out, {"VAULT_TOKEN": vault.server.root_token}) as log:
        assert file_value(out, "ROTATING") == first
        inode = out.stat().st_ino
        time.sleep(INTERVAL * 6)
        assert out.stat().st_ino == inode, "unchanged secrets must not rewrite the file"
        put_kv2(vault.server.client(), name, KEY=second, OTHER="stable")
        wait_until(lambda: file_value(out, "ROTATING") == second, what="rotated value")
        assert out.stat().st_ino != inode
    rendered = [e for e in events(log) if e["event"] == "vault.rendered"]
    assert rendered[-1]["changed"] == ["ROTATING"]
    assert rendered[-1]["message"] == "rendered 2 secrets, changed: ['ROTATING']"
    assert_no_secret_leaked({"a": first, "b": second}, log.getvalue())


def test_short_lived_token_is_renewed_before_it_expires(vault: SeededVault, tmp_path: Path) -> None:
    root = vault.server.client()
    token = root.auth.token.create(policies=["hermes-read"], ttl="3s", renewable=True)["auth"][
        "client_token"
    ]
    out = tmp_path / "env"
    settings = VaultSettings(addr=vault.addr, auth="token")
    with refresher(
        settings, ["kv1/hermes#AWS_SECRET_ACCESS_KEY=AWS"], out, {"VAULT_TOKEN": token}
    ) as log:
        time.sleep(5)
        assert root.auth.token.lookup(token)["data"]["ttl"] > 0
    assert "vault.token.renewed" in event_names(log)
    assert "vault.refresh.failed" not in event_names(log)


def test_approle_logs_in_again_when_the_token_reaches_its_max_ttl(
    vault: SeededVault, tmp_path: Path
) -> None:
    root = vault.server.client()
    name = f"short-{uuid.uuid4().hex[:8]}"
    root.sys.create_or_update_policy(
        name, f'path "secret/data/{name}" {{ capabilities = ["read"] }}'
    )
    root.auth.approle.create_or_update_approle(
        name, token_policies=[name], token_ttl="2s", token_max_ttl="3s"
    )
    (tmp_path / "role-id").write_text(root.auth.approle.read_role_id(name)["data"]["role_id"])
    (tmp_path / "secret-id").write_text(
        root.auth.approle.generate_secret_id(name)["data"]["secret_id"]
    )
    put_kv2(root, name, KEY="before")
    settings = VaultSettings(
        addr=vault.addr,
        auth="approle",
        role_id_file=tmp_path / "role-id",
        secret_id_file=tmp_path / "secret-id",
    )
    out = tmp_path / "env"
    with refresher(settings, [f"secret/data/{name}#KEY=K"], out, {}) as log:
        time.sleep(4.5)  # past the 3 s max TTL of the first token
        put_kv2(root, name, KEY="after")
        wait_until(lambda: file_value(out, "K") == "after", what="value read with the new token")
    assert "vault.token.relogin" in event_names(log)
    assert "vault.refresh.failed" not in event_names(log)


def seed_outage_server(server: OpenBaoServer, value: str) -> None:
    put_kv2(server.client(), "hermes", KEY=value)


def test_outage_keeps_the_last_file_and_recovers(tmp_path: Path) -> None:
    out = tmp_path / "env"
    with openbao_dev_server() as server:
        port = int(server.addr.rsplit(":", 1)[1])
        seed_outage_server(server, "before-outage")
        settings = VaultSettings(addr=server.addr, auth="token", timeout=2)
        with refresher(settings, ["secret/data/hermes#KEY=K"], out, {"VAULT_TOKEN": "root"}) as log:
            server.stop()
            wait_until(lambda: "vault.refresh.failed" in event_names(log), what="failure logged")
            assert file_value(out, "K") == "before-outage"
            failure = next(e for e in events(log) if e["event"] == "vault.refresh.failed")
            assert f"cannot reach Vault at {server.addr}" in str(failure["error"])
            with openbao_dev_server(port=port) as restarted:
                seed_outage_server(restarted, "after-outage")
                wait_until(lambda: file_value(out, "K") == "after-outage", what="recovery")


def test_cli_refresh_stops_cleanly_on_sigterm_without_secrets_in_argv(
    vault: SeededVault, tmp_path: Path
) -> None:
    out = tmp_path / "env"
    env = {k: v for k, v in os.environ.items() if k != "HERMES_HOME"}
    env["VAULT_TOKEN"] = vault.read_token
    argv = [
        sys.executable, "-m", "hermes_runtime", "vault", "render", "--addr", vault.addr,
        "--auth", "token", "--secret", "kv1/hermes#AWS_SECRET_ACCESS_KEY=AWS",
        "--out", str(out), "--refresh", "0.2",
    ]  # fmt: skip
    process = subprocess.Popen(
        argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        wait_until(out.exists, what="sidecar's first render")
        cmdline = Path(f"/proc/{process.pid}/cmdline").read_bytes().decode()
        assert_no_secret_leaked(vault.values, cmdline)
        assert vault.read_token not in cmdline
        time.sleep(0.6)
        assert process.poll() is None, "the sidecar must keep running"
        process.send_signal(signal.SIGTERM)
        stdout, stderr = process.communicate(timeout=15)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert process.returncode == 0, stderr
    assert read_env_file(out) == {"AWS": vault.values["aws"]}
    assert_no_secret_leaked(vault.values, stdout, stderr)


def test_revoked_token_is_replaced_by_a_new_login(vault: SeededVault, tmp_path: Path) -> None:
    root = vault.server.client()
    name = f"revoked-{uuid.uuid4().hex[:8]}"
    root.sys.create_or_update_policy(
        name, f'path "secret/data/{name}" {{ capabilities = ["read"] }}'
    )
    root.auth.approle.create_or_update_approle(name, token_policies=[name], token_ttl="1h")
    (tmp_path / "role-id").write_text(root.auth.approle.read_role_id(name)["data"]["role_id"])
    (tmp_path / "secret-id").write_text(
        root.auth.approle.generate_secret_id(name)["data"]["secret_id"]
    )
    put_kv2(root, name, KEY="before")
    settings = VaultSettings(
        addr=vault.addr,
        auth="approle",
        role_id_file=tmp_path / "role-id",
        secret_id_file=tmp_path / "secret-id",
    )
    out = tmp_path / "env"
    with refresher(settings, [f"secret/data/{name}#KEY=K"], out, {}) as log:
        root.sys.revoke_prefix("auth/approle/login")
        put_kv2(root, name, KEY="after")
        wait_until(lambda: file_value(out, "K") == "after", what="value read after re-login")
    assert "vault.token.relogin" in event_names(log)
