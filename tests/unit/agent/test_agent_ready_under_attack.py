"""``/ready`` keeps answering the kubelet while other pods flood the metrics port and hold
connections open byte by byte (a slow-loris).

A real ``hermes-runtime agent run`` with the stand-in gateway (fake_gateway.py). The attackers
are threads of this test on other loopback addresses (127.0.0.2 and up: other pods), the
kubelet comes from 127.0.0.1 and allows each probe the chart's ``timeoutSeconds``: a
functional bound (the probe is answered), not a speed benchmark. The trickling pods alone
could fill every slot (4 pods x the per-address cap = the total cap), so the probe gets in
only by taking the slot of a connection still sending its head.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from pathlib import Path

import yaml
from fake_gateway import Entrypoint, start_entrypoint, wait_for

CHART_VALUES = Path(__file__).resolve().parents[3] / "charts/hermes-agent/values.yaml"
PROBE_TIMEOUT = float(
    yaml.safe_load(CHART_VALUES.read_text())["agent"]["readinessProbe"]["timeoutSeconds"]
)
LORIS_SOURCES = [f"127.0.0.{n}" for n in range(2, 6)]  # 4 pods, 40 connections each
FLOOD_SOURCE = "127.0.0.50"


def connect_from(source: str, port: int) -> socket.socket:
    return socket.create_connection(("127.0.0.1", port), timeout=5, source_address=(source, 0))


class Attack:
    """Slow-loris connections that trickle a request head one byte at a time (reopened when
    the server closes them), and a flood of complete requests, until ``stop``."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.done = threading.Event()
        self.closed_by_server = 0
        self.flood_answers = 0
        self.threads = [threading.Thread(target=self._loris, daemon=True)]
        self.threads += [threading.Thread(target=self._flood, daemon=True) for _ in range(4)]

    def __enter__(self) -> Attack:
        for thread in self.threads:
            thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self.done.set()
        for thread in self.threads:
            thread.join(30)

    def _loris(self) -> None:
        head = b"GET /ready HTTP/1.1\r\nHost: agent\r\n" + b"X-Pad: " + b"a" * 10_000
        held: list[tuple[str, socket.socket, int]] = []
        for source in LORIS_SOURCES:
            for _ in range(40):
                with contextlib.suppress(OSError):
                    held.append((source, connect_from(source, self.port), 0))
        while not self.done.is_set():
            kept = []
            for source, sock, sent in held:
                try:
                    sock.send(head[sent : sent + 1])
                    kept.append((source, sock, sent + 1))
                except OSError:
                    self.closed_by_server += 1
                    sock.close()
                    with contextlib.suppress(OSError):  # come back at once: keep the pressure
                        kept.append((source, connect_from(source, self.port), 0))
            held = kept
            self.done.wait(0.2)
        for _, sock, _ in held:
            sock.close()

    def _flood(self) -> None:
        request = b"GET /ready HTTP/1.0\r\n\r\n", b"GET /metrics HTTP/1.0\r\n\r\n"
        n = 0
        while not self.done.is_set():
            n += 1
            try:
                with connect_from(FLOOD_SOURCE, self.port) as sock:
                    sock.sendall(request[n % 2])
                    if sock.recv(16).startswith(b"HTTP/1.0 "):
                        self.flood_answers += 1
            except OSError:
                pass


def probe(agent: Entrypoint) -> tuple[int, float]:
    started = time.monotonic()
    status, _ = agent.get("/ready", timeout=PROBE_TIMEOUT)
    return status, time.monotonic() - started


def test_ready_answers_the_kubelet_through_a_slow_loris_and_a_flood(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    agent = start_entrypoint(
        data,
        tmp_path,
        "agent",
        HERMES_RUNTIME_HTTP_MAX_CONNECTIONS="32",
        HERMES_RUNTIME_HTTP_MAX_PER_PEER="8",
        HERMES_RUNTIME_HTTP_HEAD_SECONDS="10",
    )
    try:
        wait_for(lambda: agent.get("/ready")[0] == 200, what="ready")
        with Attack(agent.metrics_port) as attack:
            time.sleep(2.0)  # every slot taken by now: 160 trickling connections, a flood
            probes = []
            for _ in range(12):
                probes.append(probe(agent))
                time.sleep(0.5)
        assert [status for status, _ in probes] == [200] * 12, probes
        assert attack.closed_by_server > 100  # the trickling ones made room, again and again
        assert attack.flood_answers > 0
        assert agent.proc.poll() is None
    finally:
        assert agent.stop() == 0, agent.output()[-2000:]
