"""Helpers for the vault integration tests: a seeded OpenBao and the CLI in a subprocess.

Seeded with: a KV v2 secret (``secret/data/hermes``), a KV v1 mount
(``kv1/hermes``), a read-only policy, an AppRole and a Kubernetes auth
mount whose TokenReview endpoint is unreachable (no cluster here).
Every value is random per run so a leak check can grep for it.
"""

from __future__ import annotations

import io
import json
import os
import secrets
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from support.certs import pem, self_signed_ca
from support.openbao import OpenBaoServer
from support.wait import wait_until

from hermes_runtime.vault import (
    OutputFile,
    VaultSettings,
    parse_secret_spec,
    read_env_file,
    run_refresh,
)

READ_POLICY = """
path "secret/data/hermes" { capabilities = ["read"] }
path "kv1/hermes" { capabilities = ["read"] }
"""


@dataclass
class SeededVault:
    server: OpenBaoServer
    values: dict[str, str]
    read_token: str
    role_id: str
    secret_id: str

    @property
    def addr(self) -> str:
        return self.server.addr


def tricky(prefix: str) -> str:
    """A unique value that also exercises quoting: quote, newline, $, =, backslash."""
    return f"{prefix}-{secrets.token_hex(8)} it's $HOME=`x`\\n\nline2"


def self_signed_ca_pem() -> str:
    return pem(self_signed_ca("test-k8s-ca")[0]).decode()


def seed(server: OpenBaoServer) -> SeededVault:
    client = server.client()
    values = {
        "openai": tricky("openai"),
        "anthropic": tricky("anthropic"),
        "aws": tricky("aws"),
    }
    client.secrets.kv.v2.create_or_update_secret(
        path="hermes",
        secret={"OPENAI_API_KEY": values["openai"], "ANTHROPIC": values["anthropic"], "PORT": 8642},
        mount_point="secret",
    )
    client.sys.enable_secrets_engine("kv", path="kv1", options={"version": "1"})
    client.write("kv1/hermes", AWS_SECRET_ACCESS_KEY=values["aws"])
    client.sys.create_or_update_policy("hermes-read", READ_POLICY)
    read_token = client.auth.token.create(policies=["hermes-read"], ttl="1h")["auth"][
        "client_token"
    ]

    client.sys.enable_auth_method("approle")
    client.auth.approle.create_or_update_approle("hermes", token_policies=["hermes-read"])
    role_id = client.auth.approle.read_role_id("hermes")["data"]["role_id"]
    secret_id = client.auth.approle.generate_secret_id("hermes")["data"]["secret_id"]

    client.sys.enable_auth_method("kubernetes")
    client.write(
        "auth/kubernetes/config",
        kubernetes_host="https://127.0.0.1:1",
        kubernetes_ca_cert=self_signed_ca_pem(),
        disable_local_ca_jwt=True,
    )
    client.write(
        "auth/kubernetes/role/hermes",
        bound_service_account_names="hermes",
        bound_service_account_namespaces="agents",
        token_policies="hermes-read",
        audience="vault",
    )
    return SeededVault(server, values, read_token, role_id, secret_id)


@dataclass
class CliRun:
    returncode: int
    stdout: str
    stderr: str
    argv: list[str]


def run_vault_cli(*args: str, env: dict[str, str] | None = None, timeout: float = 60) -> CliRun:
    """Run the real CLI in a subprocess (so argv, stdout and stderr are what a pod would see)."""
    argv = [sys.executable, "-m", "hermes_runtime", "vault", *args]
    child_env = {k: v for k, v in os.environ.items() if k not in ("VAULT_TOKEN", "HERMES_HOME")}
    child_env.update(env or {})
    result = subprocess.run(argv, capture_output=True, text=True, env=child_env, timeout=timeout)
    return CliRun(result.returncode, result.stdout, result.stderr, argv)


def assert_no_secret_leaked(values: dict[str, str], *texts: str) -> None:
    """No planted value, nor its first line, appears in any captured text."""
    for text in texts:
        for value in values.values():
            assert value not in text
            assert value.splitlines()[0] not in text


def temp_leftovers(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if p.name.endswith(".tmp"))


INTERVAL = 0.2


def events(log: io.StringIO) -> list[dict[str, object]]:
    return [json.loads(line) for line in log.getvalue().splitlines() if line.strip()]


def event_names(log: io.StringIO) -> list[str]:
    return [str(record["event"]) for record in events(log)]


def file_value(out: Path, name: str) -> str | None:
    try:
        return read_env_file(out).get(name)
    except Exception:
        return None


@contextmanager
def refresher(
    settings: VaultSettings, specs: list[str], out: Path, environ: dict[str, str]
) -> Iterator[io.StringIO]:
    """Run ``run_refresh`` in a thread; stop it and re-raise its error on exit."""
    with refresher_files(settings, specs, [OutputFile(out)], environ) as log:
        yield log


@contextmanager
def refresher_files(
    settings: VaultSettings, specs: list[str], outputs: list[OutputFile], environ: dict[str, str]
) -> Iterator[io.StringIO]:
    """``refresher`` for several output files: waits for every one's first render."""
    log = io.StringIO()
    stop = threading.Event()
    errors: list[BaseException] = []

    def target() -> None:
        try:
            parsed = [parse_secret_spec(s) for s in specs]
            run_refresh(settings, parsed, outputs, INTERVAL, stop, environ, log)
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    try:
        wait_until(
            lambda: all(o.path.exists() for o in outputs) or bool(errors),
            what=f"first render of {[str(o.path) for o in outputs]}",
        )
        yield log
    finally:
        stop.set()
        thread.join(timeout=15)
        assert not thread.is_alive(), "refresh loop did not stop"
    if errors:
        raise errors[0]
