"""Admission for the runtime's listening ports: a cap on open connections, on those of one
peer, and on the time a connection may take to send its request head.

Why: every port the pod opens (the entrypoint's ``/metrics`` and ``/ready``, LCM's ``/metrics``
inside the gateway process, the front door on the API port) is reachable from other pods before
any authentication, so each connection must cost a bounded amount and a full server must say
no at once instead of queueing. The rules, the same on every port:

- at most ``max_connections`` open at once, and at most ``max_per_peer`` from one address
  (0: no per-address cap), so one pod's flood leaves room for the kubelet and Prometheus;
- a connection must finish its request head (request line and headers) within
  ``head_seconds`` of being accepted; past that it is closed (a slow-loris);
- when a cap is reached, a newcomer takes the slot of the oldest connection that has not
  finished its head yet, of its own address for the per-address cap, else of the address
  holding the most connections: a well-behaved client (the kubelet's probe, a scrape) sends
  its whole head in one packet and is no longer evictable once it is read, and until then it
  is one connection of its address, so trickling connections from busier addresses go first.
  Only when every slot serves a complete request is the newcomer refused, with a ``503`` and
  no wait.

What it guarantees: a peer at its own cap only ever displaces its own connections, and a
full server displaces a connection of its busiest address. The kubelet's one connection is
displaced only when no address holds more than one, that is with ``max_connections``
attacking addresses or more; the pod's NetworkPolicy (metrics ports only from
``networkPolicy.ingress.metricsFrom``) is the bound there.

``Slots`` holds the bookkeeping and works from the event loop and from threads alike;
``BoundedHTTPServer`` applies it to an ``http.server`` server. The asyncio servers
(``agent/endpoints.py``, ``agent/frontdoor.py``) call ``Slots`` themselves.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field

# An attacker needs more pods than the total over the per-address cap to fill a port; a small
# HTTP answer's connection costs a socket and a task (a thread on LCM's port) for at most
# ``head_seconds`` plus the answer.
DEFAULT_MAX_CONNECTIONS = 128
DEFAULT_MAX_PER_PEER = 8
DEFAULT_HEAD_SECONDS = 10.0
MAX_CONNECTIONS = 100_000
REFUSAL_BODY = b"too many connections: retry later\n"
REFUSAL = (
    b"HTTP/1.0 503 Service Unavailable\r\n"
    b"Content-Type: text/plain\r\n"
    b"Retry-After: 1\r\n"
    b"Connection: close\r\n"
    b"Content-Length: " + str(len(REFUSAL_BODY)).encode() + b"\r\n\r\n" + REFUSAL_BODY
)


@dataclass(frozen=True)
class ServerLimits:
    """The caps of one listening port (see the module's rules)."""

    max_connections: int = DEFAULT_MAX_CONNECTIONS
    max_per_peer: int = DEFAULT_MAX_PER_PEER  # 0: no per-address cap
    head_seconds: float = DEFAULT_HEAD_SECONDS


Connections = Annotated[int, Field(ge=1, le=MAX_CONNECTIONS)]
PerPeer = Annotated[int, Field(ge=0, le=MAX_CONNECTIONS)]
HeadSeconds = Annotated[float, Field(ge=0.5, le=300)]


class HttpLimitsEnv(BaseModel):
    """The environment variables of the small HTTP ports' caps (9090 and LCM's 9091).

    The entrypoint's settings model (``agent/settings.py``, ``AgentSettings``) includes these
    fields; so does the LCM plugin's in the gateway process, which serves LCM's port and
    inherits the same environment (``lcm/host/hostsettings.py``)."""

    model_config = ConfigDict(extra="ignore", allow_inf_nan=False, frozen=True)

    http_max_connections: Connections = Field(
        DEFAULT_MAX_CONNECTIONS, alias="HERMES_RUNTIME_HTTP_MAX_CONNECTIONS"
    )
    http_max_per_peer: PerPeer = Field(
        DEFAULT_MAX_PER_PEER, alias="HERMES_RUNTIME_HTTP_MAX_PER_PEER"
    )
    http_head_seconds: HeadSeconds = Field(
        DEFAULT_HEAD_SECONDS, alias="HERMES_RUNTIME_HTTP_HEAD_SECONDS"
    )

    @property
    def limits(self) -> ServerLimits:
        return ServerLimits(
            self.http_max_connections, self.http_max_per_peer, self.http_head_seconds
        )


class Slot:
    """One admitted connection: ``head_complete`` once its request head is read (from then on
    it is never evicted), ``release`` when it closes (idempotent)."""

    def __init__(self, owner: Slots, peer: str, close: Callable[[], None]) -> None:
        self.peer = peer
        self.admitted = time.monotonic()
        self.head_done = False
        self.close = close
        self._owner = owner

    def head_complete(self) -> None:
        self.head_done = True

    def release(self) -> None:
        self._owner.forget(self)


class Slots:
    """The open connections of one port and the rules of admission (module docstring)."""

    def __init__(self, limits: ServerLimits, name: str) -> None:
        self.limits = limits
        self.name = name
        self._lock = threading.Lock()
        self._open: dict[int, Slot] = {}  # insertion order: oldest first
        self._per_peer: dict[str, int] = {}
        self.evicted = 0  # closed for a newcomer, or past the head time
        self.refused = 0

    @property
    def open(self) -> int:
        return len(self._open)

    def admit(self, peer: str, close: Callable[[], None]) -> Slot | None:
        """A slot for a new connection from ``peer`` (``close`` ends it if it is evicted);
        None: every slot it could take serves a complete request, refuse it."""
        slot = Slot(self, peer, close)
        with self._lock:
            victims = self._overdue()
            victim = self._victim_for(peer)
            if victim is False:
                self.refused += 1
                admitted = None
            else:
                if isinstance(victim, Slot):
                    victims.append(victim)
                self._add(slot)
                admitted = slot
        self._close(victims)
        return admitted

    def expire(self) -> None:
        """Close every connection past its head time (the threaded server calls this often)."""
        with self._lock:
            victims = self._overdue()
        self._close(victims)

    def forget(self, slot: Slot) -> None:
        with self._lock:
            self._remove(slot)

    def _victim_for(self, peer: str) -> Slot | bool | None:
        """Whom a newcomer from ``peer`` replaces: a slot, None (room left) or False (none)."""
        limits = self.limits
        if limits.max_per_peer and self._per_peer.get(peer, 0) >= limits.max_per_peer:
            return self._oldest_unfinished(peer) or False
        if len(self._open) >= limits.max_connections:
            return self._oldest_unfinished(self._busiest_unfinished_peer()) or False
        return None

    def _busiest_unfinished_peer(self) -> str | None:
        """The address holding the most connections among those with a head unfinished."""
        peers = {slot.peer for slot in self._open.values() if not slot.head_done}
        return max(peers, key=lambda peer: self._per_peer[peer], default=None)

    def _oldest_unfinished(self, peer: str | None) -> Slot | None:
        for slot in self._open.values():
            if not slot.head_done and (peer is None or slot.peer == peer):
                self._remove(slot)
                return slot
        return None

    def _overdue(self) -> list[Slot]:
        deadline = time.monotonic() - self.limits.head_seconds
        late = [s for s in self._open.values() if not s.head_done and s.admitted <= deadline]
        for slot in late:
            self._remove(slot)
        return late

    def _add(self, slot: Slot) -> None:
        self._open[id(slot)] = slot
        self._per_peer[slot.peer] = self._per_peer.get(slot.peer, 0) + 1

    def _remove(self, slot: Slot) -> None:
        if self._open.pop(id(slot), None) is None:
            return
        left = self._per_peer[slot.peer] - 1
        if left:
            self._per_peer[slot.peer] = left
        else:
            del self._per_peer[slot.peer]

    def _close(self, victims: list[Slot]) -> None:
        for slot in victims:
            self.evicted += 1
            with contextlib.suppress(Exception):  # already gone: nothing left to close
                slot.close()


def shut(sock: socket.socket) -> None:
    """End a connection a worker thread may be blocked reading (its read returns at once)."""
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)


def refuse_socket(sock: socket.socket) -> None:
    """The ``503``, without waiting for a client that does not read."""
    with contextlib.suppress(OSError):
        sock.setblocking(False)
        sock.send(REFUSAL)


class BoundedHTTPServer(ThreadingHTTPServer):
    """``ThreadingHTTPServer`` under ``Slots``: one thread per admitted connection only, each
    socket read bounded by ``head_seconds`` (the idle time of a keep-alive connection too),
    and connections past their head time closed at each turn of ``serve_forever``. Its
    handlers call ``head_complete`` (``HeadCompleteMixin``) once the request head is read."""

    daemon_threads = True
    request_queue_size = 128

    def __init__(self, address: tuple[str, int], handler: Any, limits: ServerLimits) -> None:
        self.slots = Slots(limits, name=f"port {address[1]}")
        self._local = threading.local()
        super().__init__(address, handler)

    def process_request(self, request: Any, client_address: Any) -> None:
        slot = self.slots.admit(str(client_address[0]), lambda: shut(request))
        if slot is None:
            refuse_socket(request)
            self.shutdown_request(request)
            return
        request.settimeout(self.slots.limits.head_seconds)
        worker = threading.Thread(
            target=self._serve_one, args=(request, client_address, slot), daemon=True
        )
        worker.start()

    def _serve_one(self, request: Any, client_address: Any, slot: Slot) -> None:
        self._local.slot = slot
        try:
            self.finish_request(request, client_address)
        except Exception:
            self.handle_error(request, client_address)
        finally:
            slot.release()
            self.shutdown_request(request)

    def head_complete(self) -> None:
        """Called on the connection's own thread once its request head is read."""
        slot: Slot | None = getattr(self._local, "slot", None)
        if slot is not None:
            slot.head_complete()

    def service_actions(self) -> None:
        self.slots.expire()


class HeadCompleteMixin(BaseHTTPRequestHandler):
    """For handlers of a ``BoundedHTTPServer``: the head is read once ``parse_request`` ends."""

    def parse_request(self) -> bool:
        ok = super().parse_request()
        server = self.server
        if ok and isinstance(server, BoundedHTTPServer):
            server.head_complete()
        return ok
