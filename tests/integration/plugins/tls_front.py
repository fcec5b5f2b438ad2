"""An index behind a private CA, for the tests: a TLS front relaying to the loopback pypiserver.

pypiserver serves plain HTTP; a company index (Artifactory, Nexus, devpi) is HTTPS with a
certificate from the company's own CA. ``private_authority`` makes such a CA and a server
certificate for 127.0.0.1 with ``cryptography``; ``tls_front`` terminates TLS with it and
relays each connection's bytes to the index, so pip meets a real handshake.
"""

from __future__ import annotations

import ipaddress
import select
import socket
import ssl
import threading
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from support.certs import certificate_builder, pem, self_signed_ca

IDLE_SECONDS = 30.0
CA_NAME = "test private CA"


@dataclass(frozen=True)
class Authority:
    ca_pem: Path  # what a client trusts
    cert_pem: Path  # the server's certificate, signed by the CA
    key_pem: Path


def private_authority(folder: Path) -> Authority:
    """A CA and a certificate it signed for 127.0.0.1 and localhost, as PEM files."""
    folder.mkdir(parents=True, exist_ok=True)
    ca, ca_key = self_signed_ca(CA_NAME)
    key = ec.generate_private_key(ec.SECP256R1())
    names = [x509.IPAddress(ipaddress.ip_address("127.0.0.1")), x509.DNSName("localhost")]
    server = (
        certificate_builder("127.0.0.1", key, CA_NAME)
        .add_extension(x509.SubjectAlternativeName(names), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    authority = Authority(folder / "ca.crt", folder / "server.crt", folder / "server.key")
    authority.ca_pem.write_bytes(pem(ca))
    authority.cert_pem.write_bytes(pem(server))
    authority.key_pem.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return authority


@contextmanager
def tls_front(upstream_port: int, authority: Authority) -> Iterator[int]:
    """Serve TLS on a free loopback port (yielded), relaying to ``upstream_port``."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(authority.cert_pem, authority.key_pem)
    listener = socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()

    def accept() -> None:
        while not stop.is_set():
            try:
                raw, _ = listener.accept()
            except OSError:
                return
            threading.Thread(target=_serve, args=(raw, context, upstream_port), daemon=True).start()

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield int(listener.getsockname()[1])
    finally:
        stop.set()
        listener.close()
        thread.join(timeout=5)


def _serve(raw: socket.socket, context: ssl.SSLContext, upstream_port: int) -> None:
    with suppress(OSError), raw:
        raw.settimeout(IDLE_SECONDS)
        # A refused handshake raises here and ends the connection.
        with (
            context.wrap_socket(raw, server_side=True) as client,
            socket.create_connection(("127.0.0.1", upstream_port)) as upstream,
        ):
            _relay(client, upstream)


def _relay(client: ssl.SSLSocket, upstream: socket.socket) -> None:
    """Bytes both ways until either side closes (one thread: an SSL object is not shared)."""
    while True:
        ready = (
            [client]
            if client.pending()
            else select.select([client, upstream], [], [], IDLE_SECONDS)[0]
        )
        if not ready:
            return
        for source in ready:
            data = source.recv(65536)
            if not data:
                return
            (upstream if source is client else client).sendall(data)
