"""The front door: the API port stays open across gateway restarts and holds clients meanwhile.

Real sockets and real HTTP servers play the gateway; the entrypoint tests run the real
``hermes-runtime agent run`` with the stand-in gateway (fake_gateway.py), whose start takes
seconds like Hermes' does.
"""

from __future__ import annotations

import asyncio
import http.server
import json
import os
import signal
import socket
import socketserver
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Coroutine, Iterator
from pathlib import Path
from typing import Any

import pytest
from fake_gateway import history, start_entrypoint, wait_for
from support.net import free_port

from hermes_runtime.agent import AgentMetrics
from hermes_runtime.agent.frontdoor import DoorPolicy, FrontDoor
from hermes_runtime.agent.handover import HandOver, Route, StopTimes


class Hello(http.server.BaseHTTPRequestHandler):
    served: list[str] = []

    def do_GET(self) -> None:
        Hello.served.append(self.path)
        body = json.dumps({"status": "ok"}).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


def serve_http(port: int) -> http.server.ThreadingHTTPServer:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", port), Hello)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


class Flags:
    """The supervisor's side of the route (``running``, ``replacing``), set by the test; the
    decision itself is the real ``HandOver.route``."""

    def __init__(self, state_dir: Path) -> None:
        self.replacing = False
        self.running = True
        self.handover = HandOver(StopTimes(30.0), state_dir, stop_gateway=lambda _signum: None)

    def route(self) -> Route:
        return self.handover.route(self)


@pytest.fixture
def loop() -> Iterator[asyncio.AbstractEventLoop]:
    """The entrypoint's event loop, on a thread of its own (the test drives clients)."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    yield loop
    loop.call_soon_threadsafe(loop.stop)
    thread.join(10)


def on(loop: asyncio.AbstractEventLoop, coroutine: Coroutine[Any, Any, None]) -> None:
    asyncio.run_coroutine_threadsafe(coroutine, loop).result(30)


@pytest.fixture
def door_for(loop: asyncio.AbstractEventLoop) -> Iterator[object]:
    doors: list[FrontDoor] = []

    def make(
        gateway_port: int, flags: Flags, hold: float = 30.0, max_held: int = 256
    ) -> tuple[FrontDoor, AgentMetrics]:
        metrics = AgentMetrics()
        door = FrontDoor(
            ("127.0.0.1", 0),
            ("127.0.0.1", gateway_port),
            flags.route,
            policy=DoorPolicy(hold_seconds=hold, retry_seconds=0.02, max_held=max_held),
            metrics=metrics,
        )
        on(loop, door.start())
        doors.append(door)
        return door, metrics

    yield make
    for door in doors:
        on(loop, door.stop())


def get(port: int, timeout: float = 30) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=timeout) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, ""
    except OSError as exc:
        return 0, repr(exc)


def in_background(port: int) -> tuple[threading.Thread, list[tuple[int, str]]]:
    results: list[tuple[int, str]] = []
    thread = threading.Thread(target=lambda: results.append(get(port)))
    thread.start()
    return thread, results


def sample(metrics: AgentMetrics, name: str, **labels: str) -> float:
    value = metrics.registry.get_sample_value(name, labels)
    return 0.0 if value is None else value


def test_a_client_is_held_until_the_gateway_listens_then_answered(
    door_for: Any, tmp_path: Path
) -> None:
    gateway_port = free_port()
    door, metrics = door_for(gateway_port, Flags(tmp_path))
    client, results = in_background(door.port)
    time.sleep(1.0)  # no gateway yet: a plain port would have refused by now
    assert client.is_alive() and not results
    server = serve_http(gateway_port)
    try:
        client.join(30)
        assert results == [(200, '{"status": "ok"}')]
    finally:
        server.shutdown()
    connections = "hermes_runtime_front_door_connections_total"
    assert sample(metrics, connections, outcome="forwarded") == 1
    assert sample(metrics, "hermes_runtime_front_door_wait_seconds_sum") >= 1.0


def test_while_the_gateway_is_replaced_new_clients_wait_even_if_the_old_one_listens(
    door_for: Any,
    tmp_path: Path,
) -> None:
    gateway_port = free_port()
    server = serve_http(gateway_port)  # the old gateway, quiesced: it must not get new clients
    flags = Flags(tmp_path)
    flags.replacing = True
    door, _ = door_for(gateway_port, flags)
    Hello.served.clear()
    try:
        client, results = in_background(door.port)
        time.sleep(0.5)
        assert Hello.served == [] and client.is_alive()
        flags.replacing = False  # the new gateway is up
        client.join(30)
        assert results == [(200, '{"status": "ok"}')] and Hello.served == ["/health"]
    finally:
        server.shutdown()


def test_a_stopping_pod_without_a_gateway_closes_new_connections_at_once(
    door_for: Any, tmp_path: Path
) -> None:
    flags = Flags(tmp_path)
    flags.running = False
    flags.handover.terminate(signal.SIGTERM)  # the kubelet's SIGTERM, no successor
    door, metrics = door_for(free_port(), flags, hold=600.0)
    status, error = get(door.port, timeout=20)  # holding would time out here
    assert status == 0, error  # closed at once: no answer, and no 30 s hold
    assert sample(metrics, "hermes_runtime_front_door_connections_total", outcome="gave_up") == 1


def test_no_gateway_within_the_hold_time_closes_the_connection(
    door_for: Any, tmp_path: Path
) -> None:
    door, metrics = door_for(free_port(), Flags(tmp_path), hold=0.5)
    status, _ = get(door.port, timeout=20)
    assert status == 0
    assert sample(metrics, "hermes_runtime_front_door_connections_total", outcome="gave_up") == 1


class Echo(socketserver.BaseRequestHandler):
    """Reads until the client half-closes, then answers with everything it read."""

    def handle(self) -> None:
        chunks = []
        while chunk := self.request.recv(65536):
            chunks.append(chunk)
        self.request.sendall(b"".join(chunks))


def test_bytes_flow_both_ways_and_a_half_close_still_gets_the_answer(
    door_for: Any, tmp_path: Path
) -> None:
    gateway_port = free_port()
    echo = socketserver.ThreadingTCPServer(("127.0.0.1", gateway_port), Echo)
    echo.daemon_threads = True
    threading.Thread(target=echo.serve_forever, daemon=True).start()
    door, _ = door_for(gateway_port, Flags(tmp_path))
    payload = os.urandom(3 * 1024 * 1024)  # more than the socket buffers: back-pressure
    try:
        with socket.create_connection(("127.0.0.1", door.port), timeout=30) as sock:
            sender = threading.Thread(
                target=lambda: (sock.sendall(payload), sock.shutdown(socket.SHUT_WR))
            )
            sender.start()
            received = bytearray()
            while chunk := sock.recv(65536):
                received += chunk
            sender.join(30)
        assert bytes(received) == payload
    finally:
        echo.shutdown()
        echo.server_close()


REQUEST = b"GET /health HTTP/1.1\r\nHost: agent\r\nConnection: close\r\n\r\n"


def open_held(port: int) -> socket.socket:
    """A client that sent its request and waits for the answer."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=30)
    sock.sendall(REQUEST)
    return sock


def read_all(sock: socket.socket) -> bytes:
    data = b""
    while chunk := sock.recv(65536):
        data += chunk
    return data


def test_past_the_cap_a_client_that_would_wait_gets_503_at_once(
    door_for: Any, tmp_path: Path
) -> None:
    gateway_port = free_port()
    door, metrics = door_for(gateway_port, Flags(tmp_path), hold=600.0, max_held=3)
    held = [open_held(door.port) for _ in range(3)]
    server = None
    try:
        wait_for(lambda: door.held == 3, what="three held connections")
        assert sample(metrics, "hermes_runtime_front_door_held") == 3
        with open_held(door.port) as fourth:  # held for 600 s without the cap
            answer = read_all(fourth)
        head, _, body = answer.partition(b"\r\n\r\n")
        lines = head.decode().split("\r\n")
        assert lines[0] == "HTTP/1.1 503 Service Unavailable"
        assert "Retry-After: 5" in lines and "Content-Type: application/json" in lines
        assert json.loads(body) == {
            "error": "the agent is not accepting connections yet and already holds 3 waiting "
            "ones: retry later",
            "retry_after_seconds": 5,
        }
        connections = "hermes_runtime_front_door_connections_total"
        assert sample(metrics, connections, outcome="refused") == 1
        assert door.held == 3  # the held ones were not dropped for it
        server = serve_http(gateway_port)
        for sock in held:
            assert read_all(sock).startswith(b"HTTP/1.0 200 OK")
        assert sample(metrics, connections, outcome="forwarded") == 3
        assert sample(metrics, "hermes_runtime_front_door_held") == 0
    finally:
        for sock in held:
            sock.close()
        if server is not None:
            server.shutdown()


def test_a_burst_never_holds_more_than_the_cap(
    loop: asyncio.AbstractEventLoop, door_for: Any, tmp_path: Path
) -> None:
    """Connections arriving together while no gateway accepts: exactly ``max_held`` are
    held and every other one is refused, however many the event loop accepts at once (here
    all 40: they queue in the listen backlog while the loop is busy)."""
    gateway_port = free_port()
    door, metrics = door_for(gateway_port, Flags(tmp_path), hold=600.0, max_held=3)
    busy = threading.Event()
    loop.call_soon_threadsafe(lambda: (busy.set(), time.sleep(1.0)))
    assert busy.wait(10)
    burst = [open_held(door.port) for _ in range(40)]
    connections = "hermes_runtime_front_door_connections_total"
    try:
        wait_for(
            lambda: sample(metrics, connections, outcome="refused") + door.held == 40,
            what="every connection of the burst held or refused",
        )
        assert door.held == 3
        assert sample(metrics, connections, outcome="refused") == 37
    finally:
        for sock in burst:
            sock.close()


class Slow(socketserver.BaseRequestHandler):
    """Answers only once released: connections stay open, forwarded, meanwhile."""

    release = threading.Event()

    def handle(self) -> None:
        Slow.release.wait(60)
        self.request.sendall(b"done")


def test_connections_a_gateway_accepts_at_once_are_never_refused(
    door_for: Any, tmp_path: Path
) -> None:
    gateway_port = free_port()
    gateway = socketserver.ThreadingTCPServer(("127.0.0.1", gateway_port), Slow)
    gateway.daemon_threads = True
    threading.Thread(target=gateway.serve_forever, daemon=True).start()
    door, metrics = door_for(gateway_port, Flags(tmp_path), max_held=1)
    Slow.release.clear()
    clients = [socket.create_connection(("127.0.0.1", door.port), timeout=30) for _ in range(5)]
    connections = "hermes_runtime_front_door_connections_total"
    try:
        wait_for(lambda: sample(metrics, connections, outcome="forwarded") == 5, what="forwards")
        Slow.release.set()
        assert [read_all(sock) for sock in clients] == [b"done"] * 5
        assert sample(metrics, connections, outcome="refused") == 0
    finally:
        for sock in clients:
            sock.close()
        gateway.shutdown()
        gateway.server_close()


def test_the_entrypoint_caps_held_connections_as_its_setting_says(tmp_path: Path) -> None:
    """``HERMES_RUNTIME_FRONT_DOOR_MAX_HELD`` reaches the front door: while the first gateway
    starts (20 s here), one client waits and the next gets the 503; the first is answered."""
    data = tmp_path / "data"
    data.mkdir()
    agent = start_entrypoint(
        data, tmp_path, "agent", HERMES_RUNTIME_FRONT_DOOR_MAX_HELD="1", FAKE_START_SECONDS="20"
    )
    first = None
    try:
        wait_for(lambda: agent.get("/metrics")[0] == 200, what="the entrypoint's endpoints")
        first = open_held(agent.api_port)
        wait_for(
            lambda: "hermes_runtime_front_door_held 1.0" in agent.get("/metrics")[1],
            what="the first client held",
        )
        with open_held(agent.api_port) as second:
            assert read_all(second).startswith(b"HTTP/1.1 503 Service Unavailable\r\n")
        assert (
            'hermes_runtime_front_door_connections_total{outcome="refused"} 1.0'
            in (agent.get("/metrics")[1])
        )
        assert read_all(first).startswith(b"HTTP/1.0 200 OK")  # once the gateway listens
    finally:
        if first is not None:
            first.close()
        wait_for(lambda: agent.get("/ready")[0] == 200, what="ready")
        assert agent.stop() == 0, agent.output()[-2000:]


def test_a_taken_api_port_fails_at_start(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        door = FrontDoor(("127.0.0.1", port), ("127.0.0.1", free_port()), Flags(tmp_path).route)
        with pytest.raises(OSError):
            asyncio.run(door.start())


def test_a_gateway_restart_fails_no_request_and_the_pod_stays_ready(tmp_path: Path) -> None:
    """The entrypoint end to end: SIGHUP restarts a gateway that needs 2 s to listen again,
    while a client polls /health on the API port and the kubelet polls /ready."""
    data = tmp_path / "data"
    data.mkdir()
    agent = start_entrypoint(data, tmp_path, "agent", FAKE_START_SECONDS="2")
    health: list[int] = []
    ready: list[int] = []
    done = threading.Event()

    def poll() -> None:
        while not done.is_set():
            health.append(agent.get("/health", agent.api_port, timeout=30)[0])
            ready.append(agent.get("/ready", timeout=30)[0])
            time.sleep(0.05)

    try:
        wait_for(lambda: agent.get("/ready")[0] == 200, what="/ready")
        poller = threading.Thread(target=poll)
        poller.start()
        try:
            os.kill(agent.proc.pid, signal.SIGHUP)
            wait_for(lambda: len(history(data)) >= 3, what="the second gateway started")
            polls = len(health)
            wait_for(lambda: len(health) > polls + 10, what="polls after the restart")
        finally:
            done.set()
            poller.join(60)
        events = [event.what for event in history(data)]
        assert events[:3] == ["start", "end", "start"], events
        assert health and set(health) == {200}, f"/health answers during the restart: {health}"
        assert ready and set(ready) == {200}, f"/ready answers during the restart: {ready}"
    finally:
        status = agent.stop()
    assert status == 0, agent.output()[-2000:]
