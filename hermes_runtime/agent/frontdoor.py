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

The gateway's own port is on loopback only, so the front door is the one way in.

The same across pods: while a pod stops and a warm successor waits for the data dir lock
(``endpoints.py``, ``datalock.py``), new connections go to the successor's front door instead
of the draining gateway; it holds them until its gateway answers. Kubernetes keeps sending
clients to the old pod (terminating, still ready) until the successor is Ready.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from hermes_runtime.agent.metrics import AgentMetrics
from hermes_runtime.common.logs import log_event

CHUNK = 64 * 1024


@dataclass(frozen=True)
class DoorPolicy:
    """How long a new connection may wait for a gateway, and how often it knocks."""

    hold_seconds: float = 60.0  # longer than a restart; shorter than a client's usual timeout
    retry_seconds: float = 0.05
    relay_connect_seconds: float = 1.0  # per knock on a successor pod (another host)


@dataclass(frozen=True)
class GatewayState:
    """What the supervisor tells the front door about the gateway behind it.

    ``replacing``: the old gateway is being quiesced or stopped for a restart (it may still
    listen, but refuses new turns): hold new connections. ``stopping``: the pod is going away
    and no gateway will come back once this one exits: do not hold.
    """

    replacing: Callable[[], bool]
    stopping: Callable[[], bool]
    running: Callable[[], bool]
    # Once stopping: the successor pod's front door (host, port) to forward new clients to.
    relay: Callable[[], tuple[str, int] | None] = lambda: None


class FrontDoor:
    """A TCP forwarder on ``listen`` to the gateway on ``upstream``; ``start``/``stop``."""

    def __init__(
        self,
        listen: tuple[str, int],
        upstream: tuple[str, int],
        gateway: GatewayState,
        *,
        policy: DoorPolicy | None = None,
        metrics: AgentMetrics | None = None,
    ) -> None:
        self._listen = listen
        self._upstream = upstream
        self._gateway = gateway
        self._policy = policy or DoorPolicy()
        self._metrics = metrics
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._active = 0  # connections being held or forwarded (changed on the loop thread)
        self._stopped: asyncio.Event | None = None  # made on the loop thread, set via the loop

    @property
    def active(self) -> int:
        """Client connections open now (held or forwarded); read from any thread."""
        return self._active

    @property
    def port(self) -> int:
        """The bound port (useful when ``listen`` asked for port 0)."""
        return self._listen[1]

    def start(self) -> None:
        """Bind now (so a taken port fails here, with the error), then serve on a thread."""
        sock = socket.create_server(self._listen, family=_family(self._listen[0]), backlog=512)
        self._listen = (self._listen[0], sock.getsockname()[1])
        ready = threading.Event()
        self._thread = threading.Thread(
            target=self._serve, args=(sock, ready), name="front-door", daemon=True
        )
        self._thread.start()
        ready.wait()
        log_event("agent.front_door.listening", port=self.port, gateway_port=self._upstream[1])

    def stop(self) -> None:
        """Stop accepting; connections in flight are closed with the loop."""
        loop, stopped = self._loop, self._stopped
        if loop is not None and stopped is not None:
            loop.call_soon_threadsafe(stopped.set)
        if self._thread is not None:
            self._thread.join(timeout=5)

    # -- the loop thread -----------------------------------------------------------------------
    def _serve(self, sock: socket.socket, ready: threading.Event) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop
        try:
            loop.run_until_complete(self._main(sock, ready))
            pending = asyncio.all_tasks(loop)
            for task in pending:
                task.cancel()
            if pending:
                loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
        finally:
            loop.close()

    async def _main(self, sock: socket.socket, ready: threading.Event) -> None:
        self._stopped = asyncio.Event()
        server = await asyncio.start_server(self._handle, sock=sock)
        ready.set()
        async with server:
            await self._stopped.wait()
            server.close()

    async def _handle(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        self._active += 1
        try:
            await self._serve_client(client_r, client_w)
        finally:
            self._active -= 1

    async def _serve_client(
        self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter
    ) -> None:
        arrived = time.monotonic()
        upstream = await self._connect_upstream(arrived)
        if upstream is None:
            self._count("gave_up", arrived)
            with contextlib.suppress(OSError):
                client_w.close()
            return
        gateway_r, gateway_w = upstream
        await asyncio.gather(
            _pipe(client_r, gateway_w), _pipe(gateway_r, client_w), return_exceptions=True
        )
        for writer in (client_w, gateway_w):
            with contextlib.suppress(OSError):
                writer.close()

    async def _connect_upstream(
        self, arrived: float
    ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter] | None:
        """Knock until the gateway accepts, while one is running or on its way."""
        deadline = arrived + self._policy.hold_seconds
        while time.monotonic() < deadline:
            gateway = self._gateway
            relay = gateway.relay() if gateway.stopping() else None
            if relay is not None:
                connection = await _connect(relay, self._policy.relay_connect_seconds)
                if connection is not None:
                    self._count("relayed", arrived)
                    return connection
            elif gateway.stopping() and not gateway.running():
                return None  # the pod is going away: no gateway will answer
            elif not gateway.replacing():
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

    def _count(self, outcome: str, arrived: float) -> None:
        if self._metrics is not None:
            self._metrics.front_door_connections.labels(outcome=outcome).inc()
            self._metrics.front_door_wait.observe(time.monotonic() - arrived)


async def _connect(
    address: tuple[str, int], timeout: float
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter] | None:
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
