"""The front door: the entrypoint listens on the API port and connects each client to the gateway.

Why: every planned restart (new plugin code, rotated secrets; ``restart.py``) and every crash
restarted in place (``supervisor.py``) replaces the gateway process, and a new Hermes gateway
needs seconds to import and bind its port. Without a front door the API port is closed for
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
answer the agent could not store must not be given. Only a connection whose first
request is a ``GET`` or ``HEAD`` (its request line is read first) is still forwarded: it
stores nothing, and the kubelet's liveness probe (``GET /health`` on this port) must not
restart a container whose LCM holds turns in memory until the volume has room. Connections
already forwarded finish; once space is freed new ones are forwarded again.

Every connection, held or forwarded, is bounded too (``common/boundedhttp.py``): at most
``limits.max_connections`` open at once and ``limits.max_per_peer`` from one address (past
them a newcomer takes the slot of the oldest connection that has not finished its request
head, or gets a ``503`` at once, counted as ``refused``), and a client must finish its first
request head (the bytes up to the first empty line) within ``limits.head_seconds`` of
connecting, or the connection is closed, counted as ``slow``. The head is watched as it passes
(read while the connection is held), never parsed nor changed. Idle keep-alive connections
after that first request are the gateway's to close (aiohttp's keep-alive timeout).

It runs on the entrypoint's event loop. Knocking is polling (``retry_seconds``): a port that
starts to listen sends no event. Held clients share one watcher of the route and the
gateway's port (``waitroom.py``): however many are held, a restart costs one connect per
interval.
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
from hermes_runtime.agent.waitroom import WaitRoom
from hermes_runtime.common.boundedhttp import REFUSAL, ServerLimits, Slot, Slots
from hermes_runtime.common.logs import log_event

Connection = tuple[asyncio.StreamReader, asyncio.StreamWriter]

CHUNK = 64 * 1024
REFUSAL_LOG_SECONDS = 10.0  # at most one "full" line this often: refusals come in floods
REFUSAL_IO_SECONDS = 1.0  # writing the 503 and reading the request: a slow client gets no more
# What still passes on a full data volume: reads store nothing (the kubelet's liveness probe,
# GET /health on this port, must not restart the container: LCM holds turns in memory).
READ_ONLY = (b"GET ", b"HEAD ")
HEAD_END = b"\r\n\r\n"
BARE_LIMITS = ServerLimits(max_connections=4096, max_per_peer=0, head_seconds=10.0)
MAX_HEAD = 64 * 1024  # past this many bytes without an empty line, the head counts as sent
LATE_READ_SECONDS = 0.05  # past the head time: only what the client has sent already


@dataclass(frozen=True)
class DoorPolicy:
    """How long a new connection may wait for a gateway, and how often it knocks."""

    hold_seconds: float = 60.0  # longer than a restart; shorter than a client's usual timeout
    retry_seconds: float = 0.05
    relay_connect_seconds: float = 1.0  # per knock on a successor pod (another host)
    max_held: int = 256  # connections waiting for a gateway at once; more get a 503
    retry_after_seconds: int = 5  # what a refused client is told: about one gateway start
    # Connections at once, per address (no per-address cap in a bare policy: tests and local
    # runs come from one address), and the time to send the first request head.
    limits: ServerLimits = BARE_LIMITS


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
        self._room = WaitRoom(
            route, lambda: asyncio.open_connection(*self._upstream), self._policy.retry_seconds
        )
        self.slots = Slots(self._policy.limits, name=f"API port {listen[1]}")

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
        peer = client_w.get_extra_info("peername") or ("?",)
        slot = self.slots.admit(str(peer[0]), lambda: self._evict(client_w))
        if slot is None:  # every slot serves a complete request: no at once, no queue
            self._count("refused", time.monotonic())
            self._log_refusal("refused", "the API port holds its maximum of connections")
            client_w.write(REFUSAL)
            client_w.close()
            return
        self._active += 1
        self._idle.clear()
        try:
            await self._serve_client(client_r, client_w, HeadWatch(slot, self._policy.limits))
        finally:
            slot.release()
            self._active -= 1
            if self._active == 0:
                self._idle.set()

    def _evict(self, client_w: asyncio.StreamWriter) -> None:
        """A connection closed for a newcomer or past its head time: it was still sending
        its request head."""
        self._count("slow", None)
        client_w.transport.abort()

    async def _serve_client(
        self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter, watch: HeadWatch
    ) -> None:
        arrived = time.monotonic()
        first = b""  # what was read of the request before it was forwarded
        full = self._reserve.verdict() if self._reserve is not None else OK
        if full != OK:
            first = await _first_bytes(client_r)
            watch.feed(first)
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
            upstream, first = await self._hold(client_r, client_w, watch, arrived, first)
        if upstream is None:
            if not client_w.is_closing():
                self._count("gave_up", arrived)
            with contextlib.suppress(OSError):
                client_w.close()
            return
        await self._forward(client_r, client_w, upstream, watch, first)

    async def _forward(
        self,
        client_r: asyncio.StreamReader,
        client_w: asyncio.StreamWriter,
        upstream: Connection,
        watch: HeadWatch,
        first: bytes,
    ) -> None:
        gateway_r, gateway_w = upstream
        if client_w.is_closing():  # evicted while it waited for the gateway
            _close_connection(upstream)
            return
        if first:
            gateway_w.write(first)
        request = self._pipe_request(client_r, client_w, gateway_w, watch)
        await asyncio.gather(request, _pipe(gateway_r, client_w), return_exceptions=True)
        for writer in (client_w, gateway_w):
            with contextlib.suppress(OSError):
                writer.close()

    async def _pipe_request(
        self,
        client_r: asyncio.StreamReader,
        client_w: asyncio.StreamWriter,
        gateway_w: asyncio.StreamWriter,
        watch: HeadWatch,
    ) -> None:
        """Client to gateway; the first request head must pass within the head time."""
        try:
            while not watch.done:
                chunk = await watch.read(client_r)
                if chunk is None:
                    self._slow(client_w, gateway_w)
                    return
                if not chunk:
                    break  # the client's EOF: ``_pipe`` passes it on
                gateway_w.write(chunk)
                await gateway_w.drain()
                watch.feed(chunk)
        except OSError:
            gateway_w.close()
            return
        await _pipe(client_r, gateway_w)

    def _slow(self, *writers: asyncio.StreamWriter) -> None:
        self._count("slow", None)
        for writer in writers:
            writer.transport.abort()

    async def _hold(
        self,
        client_r: asyncio.StreamReader,
        client_w: asyncio.StreamWriter,
        watch: HeadWatch,
        arrived: float,
        first: bytes,
    ) -> tuple[Connection | None, bytes]:
        """``_connect_upstream`` while the client's head is read meanwhile (the head time
        runs for held clients too); the connection (None: none, or the client too slow) and
        the bytes read so far.

        Counted among the held connections meanwhile. The count rises before the first await,
        so with none since the cap was checked (``_serve_client``): connections the loop
        accepted together pass that check one at a time, and the cap holds for a burst too.
        """
        self._held += 1
        self._gauge()
        try:
            buffer = bytearray(first)
            head = asyncio.ensure_future(_read_head(client_r, watch, buffer))
            connect = asyncio.ensure_future(self._connect_upstream(arrived))
            done, _ = await asyncio.wait({head, connect}, return_when=asyncio.FIRST_COMPLETED)
            if head in done and not head.result():
                if head.result() is None:
                    self._slow(client_w)
                connect.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    connection = await connect
                    _close_connection(connection)
                return None, b""
            head.cancel()  # done, or the gateway came first: the pipe watches the rest
            with contextlib.suppress(asyncio.CancelledError):
                await head
            return await connect, bytes(buffer)
        finally:
            self._held -= 1
            self._gauge()

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

    async def _connect_upstream(self, arrived: float) -> Connection | None:
        """Wait in the room until the route leads somewhere, then connect there."""
        deadline = arrived + self._policy.hold_seconds
        while (route := await self._room.wait(deadline)) is not None:
            if route.kind == "close":
                return None  # the pod is going away: no gateway will answer
            connection = await self._connect_to(route)
            if connection is not None:
                self._count("relayed" if route.kind == "relay" else "forwarded", arrived)
                return connection
            self._room.failed()  # not listening after all (a crash, a back-off): wait again
        log_event(
            "agent.front_door.gave_up",
            waited_seconds=round(time.monotonic() - arrived, 2),
            gateway_port=self._upstream[1],
        )
        return None

    async def _connect_to(self, route: Route) -> Connection | None:
        if route.kind == "relay":
            if route.address is None:
                return None
            return await _connect(route.address, self._policy.relay_connect_seconds)
        try:
            return await asyncio.open_connection(*self._upstream)
        except OSError:
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
        self._log_refusal(outcome, why)
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

    def _log_refusal(self, outcome: str, why: str) -> None:
        now = time.monotonic()
        if now - self._refused_logged >= REFUSAL_LOG_SECONDS:  # at most one line a while
            self._refused_logged = now
            event = "agent.front_door.volume_full" if outcome == "full" else "agent.front_door.full"
            log_event(event, level="warning", held=self._held, reason=why)

    def _gauge(self) -> None:
        if self._metrics is not None:
            self._metrics.front_door_held.set(self._held)

    def _count(self, outcome: str, arrived: float | None) -> None:
        if self._metrics is not None:
            self._metrics.front_door_connections.labels(outcome=outcome).inc()
            if arrived is not None:
                self._metrics.front_door_wait.observe(time.monotonic() - arrived)


class HeadWatch:
    """A client's first request head as it passes: complete once an empty line (or
    ``MAX_HEAD`` bytes) went by, due ``limits.head_seconds`` after the connection came."""

    def __init__(self, slot: Slot, limits: ServerLimits) -> None:
        self.slot = slot
        self.deadline = slot.admitted + limits.head_seconds
        self._tail = b""
        self._size = 0

    @property
    def done(self) -> bool:
        return self.slot.head_done

    def feed(self, data: bytes) -> None:
        if HEAD_END in self._tail + data or self._size + len(data) >= MAX_HEAD:
            self.slot.head_complete()
        self._tail = (self._tail + data)[-3:]
        self._size += len(data)

    async def read(self, reader: asyncio.StreamReader) -> bytes | None:
        """The client's next bytes (b"" at its EOF); None once the head time is over. Past
        it, bytes already received still count (the gateway may have been slow to accept)."""
        left = max(self.deadline - time.monotonic(), LATE_READ_SECONDS)
        try:
            return await asyncio.wait_for(reader.read(CHUNK), left)
        except TimeoutError:
            return None


async def _read_head(
    reader: asyncio.StreamReader, watch: HeadWatch, into: bytearray
) -> bool | None:
    """Read the client's head into ``into`` (a held client): True once complete, None when
    too slow, False when the client went away."""
    try:
        while not watch.done:
            chunk = await watch.read(reader)
            if chunk is None:
                return None
            if not chunk:
                return False
            into += chunk
            watch.feed(chunk)
    except OSError:
        return False
    return True


def _close_connection(connection: Connection | None) -> None:
    if connection is not None:
        with contextlib.suppress(OSError):
            connection[1].close()


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
