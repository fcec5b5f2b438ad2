"""Every listening port caps its connections and the time to send a request head.

``Slots`` (common/boundedhttp.py) on its own, then LCM's metrics port (the real
``serve_metrics``, a ``BoundedHTTPServer`` in this process as in the gateway's) and the front
door (the real ``FrontDoor`` on its own event loop, a real HTTP server as the gateway). Other
pods are other loopback addresses (127.0.0.2 and up).
"""

from __future__ import annotations

import asyncio
import contextlib
import http.server
import json
import socket
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

from fake_gateway import wait_for
from support.net import free_port

from hermes_runtime.agent import AgentMetrics
from hermes_runtime.agent.frontdoor import DoorPolicy, FrontDoor
from hermes_runtime.agent.handover import HandOver, Route, StopTimes
from hermes_runtime.common.boundedhttp import ServerLimits, Slots
from hermes_runtime.lcm.host.hostsettings import PluginHostSettings
from hermes_runtime.lcm.host.plugin_host import serve_metrics


def connect_from(source: str, port: int) -> socket.socket:
    return socket.create_connection(("127.0.0.1", port), timeout=10, source_address=(source, 0))


def closed_by_server(sock: socket.socket, within: float) -> bool:
    """Whether the server closes ``sock`` within ``within`` seconds (EOF or reset)."""
    sock.settimeout(within)
    try:
        while sock.recv(4096):
            pass
    except TimeoutError:
        return False
    except OSError:
        return True
    return True


# -- Slots ---------------------------------------------------------------------------------------


def test_a_newcomer_takes_the_slot_of_the_oldest_connection_still_sending_its_head() -> None:
    closed: list[str] = []
    slots = Slots(ServerLimits(max_connections=3, max_per_peer=2, head_seconds=60), "test")

    def admit(peer: str, name: str) -> object:
        return slots.admit(peer, lambda: closed.append(name))

    a1 = admit("a", "a1")
    assert a1 is not None
    a1.head_complete()  # type: ignore[attr-defined]
    assert admit("a", "a2") is not None
    a3 = admit("a", "a3")  # a's cap (2): a2 goes, a1 (a complete request) stays
    assert closed == ["a2"] and a3 is not None
    a3.head_complete()  # type: ignore[attr-defined]
    assert admit("a", "a4") is None  # both of a's slots serve complete requests: refused
    assert admit("b", "b1") is not None
    c1 = admit("c", "c1")  # the total cap (3): the oldest unfinished one, b1, goes
    assert closed == ["a2", "b1"] and c1 is not None
    c1.head_complete()  # type: ignore[attr-defined]
    assert admit("d", "d1") is None and slots.refused == 2
    a1.release()  # type: ignore[attr-defined]
    a1.release()  # type: ignore[attr-defined]  # idempotent
    assert admit("d", "d2") is not None and slots.open == 3


def test_a_full_server_displaces_the_busiest_address_not_an_older_lone_probe() -> None:
    """The kubelet's probe, admitted before a storm of trickling reconnects, keeps its slot
    until its head is read: each newcomer displaces a connection of the busiest address."""
    closed: list[str] = []
    slots = Slots(ServerLimits(max_connections=4, max_per_peer=0, head_seconds=60), "test")
    assert slots.admit("loris", lambda: closed.append("old-loris")) is not None
    probe = slots.admit("kubelet", lambda: closed.append("probe"))
    for n in range(20):  # reconnects: each takes a slot of the address holding the most
        assert slots.admit("loris", lambda n=n: closed.append(f"loris-{n}")) is not None
    assert "probe" not in closed and probe is not None and slots.open == 4
    probe.head_complete()
    assert "old-loris" in closed


def test_a_connection_past_its_head_time_is_closed() -> None:
    closed: list[str] = []
    slots = Slots(ServerLimits(max_connections=8, max_per_peer=0, head_seconds=0.3), "test")
    slow = slots.admit("a", lambda: closed.append("slow"))
    done = slots.admit("a", lambda: closed.append("done"))
    assert slow is not None and done is not None
    done.head_complete()
    slots.expire()
    assert closed == []
    time.sleep(0.4)
    slots.expire()
    assert closed == ["slow"] and slots.open == 1


# -- LCM's metrics port (threads) ----------------------------------------------------------------


def scrape(port: int) -> int:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as answer:
        return int(answer.status)


def test_lcm_metrics_port_bounds_its_threads_and_slow_heads() -> None:
    settings = PluginHostSettings.from_environ(
        {
            "HERMES_RUNTIME_HTTP_MAX_CONNECTIONS": "6",
            "HERMES_RUNTIME_HTTP_MAX_PER_PEER": "3",
            "HERMES_RUNTIME_HTTP_HEAD_SECONDS": "1",
        }
    )
    port = free_port()
    serve_metrics(port, settings.limits)
    wait_for(lambda: scrape(port) == 200, what="LCM's metrics port")
    threads = threading.active_count()
    silent = [connect_from(f"127.0.0.{2 + n % 4}", port) for n in range(40)]
    try:
        time.sleep(0.5)
        assert threading.active_count() <= threads + 6  # one thread per admitted connection
        assert scrape(port) == 200  # Prometheus, from its own address, still gets its scrape
        evicted = sum(closed_by_server(sock, 0.2) for sock in silent)
        assert evicted >= 40 - 6
    finally:
        for sock in silent:
            sock.close()
    with connect_from("127.0.0.9", port) as loris:
        started = time.monotonic()
        for byte in b"GET /metrics HTTP/1.0\r\nX: " + b"a" * 100:
            try:
                loris.send(bytes([byte]))
            except OSError:
                break
            time.sleep(0.1)
        assert closed_by_server(loris, 3.0)
        assert time.monotonic() - started < 1.0 + 3.0  # the head time, and one turn of the loop


# -- the front door (asyncio) --------------------------------------------------------------------


class Hello(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = json.dumps({"status": "ok"}).encode()
        with contextlib.suppress(OSError):  # a cut-off head the front door closed meanwhile
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


class Stalled(http.server.BaseHTTPRequestHandler):
    """A gateway busy with every request (a long turn): complete requests keep their slot."""

    release = threading.Event()

    def do_GET(self) -> None:
        Stalled.release.wait(30)
        self.send_response(204)
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


@contextlib.contextmanager
def gateway(handler: type[http.server.BaseHTTPRequestHandler]) -> Iterator[int]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()


@contextlib.contextmanager
def front_door(
    tmp_path: Path, gateway_port: int, limits: ServerLimits
) -> Iterator[tuple[FrontDoor, AgentMetrics]]:
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    handover = HandOver(StopTimes(30.0), tmp_path, stop_gateway=lambda _signum: None)

    class Running:
        running = True
        replacing = False

    def route() -> Route:
        return handover.route(Running())

    metrics = AgentMetrics()
    door = FrontDoor(
        ("127.0.0.1", 0),
        ("127.0.0.1", gateway_port),
        route,
        policy=DoorPolicy(limits=limits),
        metrics=metrics,
    )
    asyncio.run_coroutine_threadsafe(door.start(), loop).result(10)
    try:
        yield door, metrics
    finally:
        asyncio.run_coroutine_threadsafe(door.stop(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)


def health(port: int) -> int:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5) as answer:
        return int(answer.status)


def test_the_front_door_closes_slow_heads_and_keeps_room_for_the_liveness_probe(
    tmp_path: Path,
) -> None:
    limits = ServerLimits(max_connections=8, max_per_peer=4, head_seconds=1.0)
    with gateway(Hello) as gateway_port, front_door(tmp_path, gateway_port, limits) as (door, m):
        loris = [connect_from(f"127.0.0.{2 + n % 5}", door.port) for n in range(20)]
        for sock in loris:
            sock.send(b"GET /v1/models HTTP/1.1\r\n")  # and never the rest of the head
        try:
            for _ in range(5):  # the kubelet's liveness probe, from the node's address
                assert health(door.port) == 200
            assert all(closed_by_server(sock, 3.0) for sock in loris)  # evicted or too slow
        finally:
            for sock in loris:
                sock.close()
        slow = m.registry.get_sample_value(
            "hermes_runtime_front_door_connections_total", {"outcome": "slow"}
        )
        assert slow == 20
        assert health(door.port) == 200


def test_the_front_door_refuses_at_once_when_every_slot_serves_a_request(tmp_path: Path) -> None:
    limits = ServerLimits(max_connections=2, max_per_peer=0, head_seconds=5.0)
    Stalled.release.clear()
    with gateway(Stalled) as port, front_door(tmp_path, port, limits) as (door, metrics):
        busy = [connect_from("127.0.0.2", door.port) for _ in range(2)]
        try:
            for sock in busy:
                sock.sendall(b"GET /v1/chat HTTP/1.1\r\nHost: agent\r\n\r\n")
            wait_for(lambda: door.slots.open == 2 and door.active == 2, what="two forwarded")
            time.sleep(0.2)  # their heads went by: no longer evictable
            with connect_from("127.0.0.3", door.port) as third:
                third.settimeout(5)
                assert third.recv(64).startswith(b"HTTP/1.0 503 Service Unavailable")
            refused = metrics.registry.get_sample_value(
                "hermes_runtime_front_door_connections_total", {"outcome": "refused"}
            )
            assert refused == 1
        finally:
            Stalled.release.set()
            for sock in busy:
                sock.close()
