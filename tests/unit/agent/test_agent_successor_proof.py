"""A stopping pod relays its clients only to an address that proves it is a pod of the release.

``successor.lock`` is on the data volume, which the agent's shell writes as the entrypoint's
user: a planted record must get no client byte and no bearer key. The policy's rules on their
own first, then a real ``hermes-runtime agent run`` (stand-in gateway, fake_gateway.py) whose
hook finds a record planted by this test (a ``flock`` held, as a waiting pod holds it) pointing
at listeners this test controls.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import ipaddress
import json
import os
import signal
import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from fake_gateway import API_KEY, start_entrypoint, wait_for

from hermes_runtime.agent.successor import (
    SUCCESSOR_LOCK_NAME,
    RelayPolicy,
    Successor,
    answer_proof,
    ip_address_of,
)

KEY = "k" * 40


# -- the address rules ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("host", "api_port", "metrics_port", "refused"),
    [
        ("10.244.1.7", 8642, 9090, None),
        ("agent.example", 8642, 9090, "is no IP address"),
        ("224.0.0.1", 8642, 9090, "no pod address"),
        ("0.0.0.0", 8642, 9090, "no pod address"),
        ("169.254.169.254", 8642, 9090, "no pod address"),
        ("10.244.1.5", 8642, 9090, "this pod's own address"),  # ours
        ("::ffff:10.244.1.5", 8642, 9090, "this pod's own address"),
        ("127.0.0.1", 8642, 9090, "this pod's own address"),  # a listener in our own pod
        ("10.244.1.7", 4444, 9090, "are not this release's"),
        ("10.244.1.7", 8642, 0, "no metrics port"),
        ("10.99.0.3", 8642, 9090, "outside HERMES_RUNTIME_RELAY_CIDRS"),
    ],
)
def test_only_another_pods_address_on_the_releases_ports_may_be_asked(
    host: str, api_port: int, metrics_port: int, refused: str | None
) -> None:
    policy = RelayPolicy(
        own=Successor("10.244.1.5", 8642, 9090),
        networks=(ipaddress.ip_network("10.244.0.0/16"),),
    )
    why = policy.refusal(Successor(host, api_port, metrics_port))
    assert (why is None) if refused is None else (why is not None and refused in why), why
    assert ip_address_of("::ffff:10.0.0.1") == ip_address_of("10.0.0.1")


# -- the proof -----------------------------------------------------------------------------------


@contextlib.asynccontextmanager
async def answering(prove: Callable[[str, int], str | None]) -> Iterator[int]:  # type: ignore[misc]
    """A metrics port answering ``/successor-proof?nonce=N`` with ``prove(nonce, port)``."""
    port = 0

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        nonce = head.split()[1].decode().partition("nonce=")[2]
        proof = prove(nonce, port)
        status, body = (200, json.dumps({"proof": proof})) if proof else (404, "")
        writer.write(f"HTTP/1.0 {status} X\r\n\r\n{body}".encode())
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    async with server:
        yield port


def verdict(prove: Callable[[str, int], str | None], key: str = KEY) -> str | None:
    async def ask() -> str | None:
        async with answering(prove) as port:
            return await RelayPolicy(key=lambda: key).verify(Successor("127.0.0.1", 8642, port), 5)

    return asyncio.run(ask())


def test_the_successor_passes_with_the_releases_key_and_its_own_address() -> None:
    assert verdict(lambda n, port: answer_proof(KEY, n, Successor("127.0.0.1", 8642, port))) is None


@pytest.mark.parametrize(
    ("case", "prove"),
    [
        ("another key", lambda n, p: answer_proof("x" * 40, n, Successor("127.0.0.1", 8642, p))),
        # A listener that forwards the nonce to a real pod gets that pod's proof, not its own.
        ("another pod's proof", lambda n, p: answer_proof(KEY, n, Successor("10.0.0.9", 8642, p))),
        ("no proof", lambda n, p: None),
        ("garbage", lambda n, p: "00" * 32),
    ],
)
def test_anything_but_the_proof_for_the_claimed_address_is_refused(
    case: str, prove: Callable[[str, int], str | None]
) -> None:
    assert verdict(prove) is not None, case


def test_without_a_key_nothing_is_proven() -> None:
    prove = lambda n, p: answer_proof(KEY, n, Successor("127.0.0.1", 8642, p))  # noqa: E731
    assert verdict(prove, key="") == "this pod has no API key to check a proof with"


def test_nothing_listening_is_no_verdict_yet() -> None:
    async def ask() -> None:
        with socket.socket() as closed:
            closed.bind(("127.0.0.1", 0))
            port = closed.getsockname()[1]
        await RelayPolicy(key=lambda: KEY).verify(Successor("127.0.0.1", 8642, port), 2)

    with pytest.raises(OSError):
        asyncio.run(ask())


# -- a planted record, end to end ---------------------------------------------------------------


class Recorder:
    """A listener that keeps every byte any client sends it; ``answer`` (if any) is written
    back after ``delay`` seconds, once a request head came."""

    def __init__(self, answer: bytes = b"", delay: float = 0.0) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.received = b""
        self.connections = 0
        self._answer, self._delay = answer, delay
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.connections += 1
            threading.Thread(target=self._one, args=(conn,), daemon=True).start()

    def _one(self, conn: socket.socket) -> None:
        with conn:
            conn.settimeout(10)
            with contextlib.suppress(OSError):
                while b"\r\n\r\n" not in self.received and (chunk := conn.recv(4096)):
                    self.received += chunk
                time.sleep(self._delay)
                conn.sendall(self._answer)

    def close(self) -> None:
        self.sock.close()


def plant(state_dir: Path, record: dict[str, object]) -> int:
    """What the shell can do: hold the lock a waiting pod holds, write its own record."""
    fd = os.open(state_dir / SUCCESSOR_LOCK_NAME, os.O_RDWR | os.O_CREAT, 0o640)
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    os.ftruncate(fd, 0)
    os.pwrite(fd, json.dumps(record).encode(), 0)
    return fd


def test_a_planted_successor_record_gets_no_client_byte_and_no_key(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    pod = start_entrypoint(
        data,
        tmp_path,
        "first",
        HERMES_RUNTIME_HANDOVER_SECONDS="30",
        HERMES_RUNTIME_TERMINATION_GRACE_SECONDS="120",
        HERMES_RUNTIME_PRESTOP_SECONDS="1",
        FAKE_DRAIN_SECONDS="4",
    )
    api = Recorder(b'HTTP/1.0 200 OK\r\n\r\n{"name": "planted"}')
    # It answers the proof request, wrongly, after a second: meanwhile a client arrives.
    wrong = json.dumps({"proof": "ab" * 32})
    metrics = Recorder(f"HTTP/1.0 200 OK\r\n\r\n{wrong}".encode(), delay=1.0)
    fd = None
    try:
        wait_for(lambda: pod.get("/ready")[0] == 200, what="ready")
        record = {"host": "127.0.0.1", "api_port": api.port, "metrics_port": metrics.port}
        fd = plant(data / ".hermes-runtime", record)
        status, answer = pod.pre_stop(timeout=60)
        assert status == 0 and answer["successor"] is True
        pod.proc.send_signal(signal.SIGTERM)
        wait_for(lambda: metrics.connections > 0, what="the proof asked for")
        with socket.create_connection(("127.0.0.1", pod.api_port), timeout=30) as client:
            client.sendall(
                b"GET /health HTTP/1.1\r\nHost: agent\r\n"
                + f"Authorization: Bearer {API_KEY}\r\n".encode()
                + b"Connection: close\r\n\r\n"
            )
            reply = b""
            with contextlib.suppress(OSError):
                while chunk := client.recv(4096):
                    reply += chunk
        assert pod.proc.wait(60) == 0, pod.output()[-2000:]
    finally:
        if fd is not None:
            os.close(fd)
        pod.proc.kill()
        api.close()
        metrics.close()
    assert api.connections == 0 and api.received == b""  # not one byte relayed there
    assert API_KEY.encode() not in metrics.received
    assert metrics.received.startswith(b"GET /successor-proof?nonce=")
    assert b'"planted"' not in reply
    if reply:  # the draining gateway answered it (or it was closed): ours, never theirs
        assert b'"first"' in reply
    output = pod.output()
    assert "agent.handover.successor_refused" in output
    assert "agent.handover.successor_proven" not in output
