"""The front door: the entrypoint listens on the API port and connects each client to the gateway.

Why: every planned restart (new plugin code, rotated secrets; ``restart.py``) and every crash
restarted in place (``supervisor.py``) replaces the gateway process, and a new Hermes gateway
needs 4-6 s to import and bind its port. Without a front door the API port is closed for
that long: clients get "connection refused" and the Service drops the pod. The entrypoint
outlives every gateway, so it owns the port instead. While a gateway is being replaced it
holds new connections (accepted, not yet forwarded) and forwards them once the new gateway
accepts: a restart becomes a delay, not an error.

It forwards bytes, not HTTP: streamed answers, keep-alive and every client work unchanged,
and nothing is parsed or buffered beyond one read. Connections already forwarded stay with
the gateway they reached, which drains them (Hermes' own drain on SIGUSR1/SIGTERM).

The gateway's own port is on loopback only, so the front door is the one way in. It has no
path of its own: every byte goes to Hermes (whose API key guards it), and nothing a client
sends changes the entrypoint's state.

Holding costs a socket and a task per connection for up to ``hold_seconds``, before any
authentication (Hermes checks the key once the bytes reach it), so the number held at once is
capped (``max_held``, ``HERMES_RUNTIME_FRONT_DOOR_MAX_HELD``): past it a new connection that
would have to wait gets an immediate ``503`` with ``Retry-After`` and a short JSON body, counted
as ``refused``. A connection the gateway accepts at once is never refused: the cap only bites
while no gateway accepts (a restart, a stop).

The same across pods: while a pod stops and a warm successor waits for the data dir lock,
new connections go to the successor's front door instead of the draining gateway; it holds
them until its gateway answers. Kubernetes keeps sending clients to the old pod (terminating,
still ready) until the successor is Ready. Where a new client goes is one decision,
``route()`` (``HandOver.route``, ``handover.py``), asked at each knock.

A full data volume (free space under ``HERMES_RUNTIME_DATA_MIN_FREE_MIB``, ``datareserve.py``)
refuses every new connection the same way, counted as ``full``, with a body that says so: an
answer the agent could not store must not be given (issue 30). Only a connection whose first
request is a ``GET`` or ``HEAD`` (its request line is read first) is still forwarded: it
stores nothing, and the kubelet's liveness probe (``GET /health`` on this port) must not
restart a container whose LCM holds turns in memory until the volume has room. Connections
already forwarded finish; once space is freed new ones are forwarded again.

It runs on the entrypoint's event loop. Knocking is polling (``retry_seconds``): a port that
starts to listen sends no event, so a held client tries to connect again and again.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass

from hermes_runtime.agent.datareserve import OK, DataReserve
from hermes_runtime.agent.handover import Route
from hermes_runtime.agent.metrics import AgentMetrics
from hermes_runtime.common.logs import log_event

Connection = tuple[asyncio.StreamReader, asyncio.StreamWriter]

CHUNK = 64 * 1024
REFUSAL_LOG_SECONDS = 10.0  # at most one "full" line this often: refusals come in floods
REFUSAL_IO_SECONDS = 1.0  # writing the 503 and reading the request: a slow client gets no more
# What still passes on a full data volume: reads store nothing (the kubelet's liveness probe,
# GET /health on this port, must not restart the container: LCM holds turns in memory).
READ_ONLY = (b"GET ", b"HEAD ")


@dataclass(frozen=True)
class DoorPolicy:
    """How long a new connection may wait for a gateway, and how often it knocks."""

    hold_seconds: float = 60.0  # longer than a restart; shorter than a client's usual timeout
    retry_seconds: float = 0.05
    relay_connect_seconds: float = 1.0  # per knock on a successor pod (another host)
    max_held: int = 256  # connections waiting for a gateway at once; more get a 503
    retry_after_seconds: int = 5  # what a refused client is told: about one gateway start


class FrontDoor:
    """A TCP forwarder on ``listen`` to the gateway on ``upstream``; ``start``/``stop``."""

    def __init__(
        self,
        listen: tuple[str, int],
        upstream: tuple[str, int],
        route: Callable[[], Route],
        *,
        policy: DoorPolicy | None = None,
        metrics: AgentMetrics | None = None,
        reserve: DataReserve | None = None,
    ) -> None:
        self._listen = listen
        self._upstream = upstream
        self._route = route
        self._policy = policy or DoorPolicy()
        self._metrics = metrics
        self._reserve = reserve  # the data volume's free space (None: not checked)
        self._server: asyncio.Server | None = None
        self._active = 0  # connections being held or forwarded
        self._held = 0  # connections waiting for a gateway
        self._idle = asyncio.Event()  # set while no connection is open
        self._idle.set()
        self._refused_logged = -math.inf  # when the last refusal was logged (monotonic)

    @property
    def active(self) -> int:
        """Client connections open now (held or forwarded)."""
        return self._active

    @property
    def held(self) -> int:
        """Client connections waiting for a gateway now."""
        return self._held

    @property
    def port(self) -> int:
        """The bound port (useful when ``listen`` asked for port 0)."""
        return self._listen[1]

    async def start(self) -> None:
        """Bind (a taken port fails here, with its ``OSError``) and serve on the loop."""
        sock = socket.create_server(self._listen, family=_family(self._listen[0]), backlog=512)
        self._listen = (self._listen[0], sock.getsockname()[1])
        try:
            self._server = await asyncio.start_server(self._handle, sock=sock)
        except BaseException:
            sock.close()
            raise
        log_event("agent.front_door.listening", port=self.port, gateway_port=self._upstream[1])

    async def stop(self) -> None:
        """Stop accepting; connections in flight end with the loop."""
        if self._server is not None:
            self._server.close()

    async def wait_idle(self) -> None:
        """Return once no client connection is open (at once if none is)."""
        await self._idle.wait()

    async def _handle(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        self._active += 1
        self._idle.clear()
        try:
            await self._serve_client(client_r, client_w)
        finally:
            self._active -= 1
            if self._active == 0:
                self._idle.set()

    async def _serve_client(
        self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter
    ) -> None:
        arrived = time.monotonic()
        first = b""  # what was read of the request before it was forwarded
        full = self._reserve.verdict() if self._reserve is not None else OK
        if full != OK:
            first = await _first_bytes(client_r)
            if not first.startswith(READ_ONLY):  # a turn answered now could not be stored
                await self._refuse(client_r, client_w, arrived, "full", full)
                return
        upstream = await self._knock(arrived)
        if upstream is None and self._held >= self._policy.max_held:
            why = (
                "the agent is not accepting connections yet and already holds "
                f"{self._policy.max_held} waiting ones: retry later"
            )
            await self._refuse(client_r, client_w, arrived, "refused", why)
            return
        if upstream is None:
            upstream = await self._held_until_upstream(arrived)
        if upstream is None:
            self._count("gave_up", arrived)
            with contextlib.suppress(OSError):
                client_w.close()
            return
        gateway_r, gateway_w = upstream
        if first:
            gateway_w.write(first)
        await asyncio.gather(
            _pipe(client_r, gateway_w), _pipe(gateway_r, client_w), return_exceptions=True
        )
        for writer in (client_w, gateway_w):
            with contextlib.suppress(OSError):
                writer.close()

    async def _knock(self, arrived: float) -> Connection | None:
        """One try, without waiting: a gateway that accepts at once takes the client."""
        if self._route().kind != "gateway":
            return None
        try:
            connection = await asyncio.open_connection(*self._upstream)
        except OSError:
            return None
        self._count("forwarded", arrived)
        return connection

    async def _held_until_upstream(self, arrived: float) -> Connection | None:
        """``_connect_upstream``, counted among the held connections meanwhile."""
        self._held += 1
        self._gauge()
        try:
            return await self._connect_upstream(arrived)
        finally:
            self._held -= 1
            self._gauge()

    async def _connect_upstream(self, arrived: float) -> Connection | None:
        """Knock until the gateway accepts, while one is running or on its way."""
        deadline = arrived + self._policy.hold_seconds
        while time.monotonic() < deadline:
            route = self._route()
            if route.kind == "relay" and route.address is not None:
                connection = await _connect(route.address, self._policy.relay_connect_seconds)
                if connection is not None:
                    self._count("relayed", arrived)
                    return connection
            elif route.kind == "close":
                return None  # the pod is going away: no gateway will answer
            elif route.kind == "gateway":
                try:
                    connection = await asyncio.open_connection(*self._upstream)
                except OSError:
                    pass  # not listening yet (starting, crashed, back-off): knock again
                else:
                    self._count("forwarded", arrived)
                    return connection
            await asyncio.sleep(self._policy.retry_seconds)
        log_event(
            "agent.front_door.gave_up",
            waited_seconds=round(time.monotonic() - arrived, 2),
            gateway_port=self._upstream[1],
        )
        return None

    async def _refuse(
        self,
        client_r: asyncio.StreamReader,
        client_w: asyncio.StreamWriter,
        arrived: float,
        outcome: str,
        why: str,
    ) -> None:
        """``503`` at once, then close: the client reads ``why`` and when to come back instead
        of waiting in a queue that holds ``max_held`` already, or for an answer the agent
        could not store (``outcome`` ``full``: the data volume)."""
        self._count(outcome, arrived)
        now = time.monotonic()
        if now - self._refused_logged >= REFUSAL_LOG_SECONDS:  # at most one line a while
            self._refused_logged = now
            event = "agent.front_door.volume_full" if outcome == "full" else "agent.front_door.full"
            log_event(event, level="warning", held=self._held, reason=why)
        body = json.dumps(
            {"error": why, "retry_after_seconds": self._policy.retry_after_seconds}
        ).encode()
        head = (
            "HTTP/1.1 503 Service Unavailable\r\n"
            "Content-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n"
            f"Retry-After: {self._policy.retry_after_seconds}\r\n"
            "Connection: close\r\n\r\n"
        ).encode()
        with contextlib.suppress(OSError, TimeoutError):
            client_w.write(head + body)
            await asyncio.wait_for(client_w.drain(), REFUSAL_IO_SECONDS)
            if client_w.can_write_eof():
                client_w.write_eof()
            # Read what the client sent before closing: unread bytes would make the close a
            # reset, which can reach the client before it read the answer.
            await asyncio.wait_for(client_r.read(CHUNK), REFUSAL_IO_SECONDS)
        with contextlib.suppress(OSError):
            client_w.close()

    def _gauge(self) -> None:
        if self._metrics is not None:
            self._metrics.front_door_held.set(self._held)

    def _count(self, outcome: str, arrived: float) -> None:
        if self._metrics is not None:
            self._metrics.front_door_connections.labels(outcome=outcome).inc()
            self._metrics.front_door_wait.observe(time.monotonic() - arrived)


async def _first_bytes(reader: asyncio.StreamReader) -> bytes:
    """The first bytes a client sends (its request line), or b"" if none come in time."""
    with contextlib.suppress(OSError, TimeoutError):
        return await asyncio.wait_for(reader.read(CHUNK), REFUSAL_IO_SECONDS)
    return b""


async def _connect(address: tuple[str, int], timeout: float) -> Connection | None:
    try:
        return await asyncio.wait_for(asyncio.open_connection(*address), timeout)
    except (OSError, TimeoutError):
        return None  # not listening yet (waiting for the lock) or unreachable: knock again


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Copy until EOF, then half-close: an HTTP client may close its side and still read."""
    try:
        while chunk := await reader.read(CHUNK):
            writer.write(chunk)
            await writer.drain()
        if writer.can_write_eof():
            writer.write_eof()
    except OSError:
        writer.close()


def _family(host: str) -> socket.AddressFamily:
    return socket.AF_INET6 if ":" in host else socket.AF_INET
