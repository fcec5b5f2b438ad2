"""``successor.lock``: how a pod waiting for the data dir lock says it is ready to take over.

Both sides of one file on the data volume (``.hermes-runtime/successor.lock``):

- the successor (``Announcement``): a pod waiting for the data dir lock (``datalock.py``)
  holds an exclusive ``flock`` on this file once it is ready to take over (its gateway
  imported, ``zygote.py``), and writes where it can be reached (``Successor``); it lets go
  once the data dir lock is its own.
- the pod being replaced (``waiting_successor``, read by ``handover.py`` while its preStop
  hook waits): a held lock means a warm successor waits; the record says where to forward
  new clients.

Why a lock and not just the file: a successor that dies (a deleted pod, a node gone) drops
its ``flock`` with its process, so a stale record is never taken for a waiting pod. Before
the data dir lock, the only writes to the volume are these two lock files. Two pods waiting
at once (a delete during a rollout): the first to be ready holds it, the other simply waits
for the data dir lock.

The record is not trusted (``RelayPolicy``). The agent's shell runs as the entrypoint's user
and writes the data volume, so it can hold the lock and write any address into the record;
a stopping pod that relayed there would hand it its clients, bearer key and all. So a stopping
pod relays only to an address that proves, before the first client byte, that a pod of this
release answers there:

- the address rules: an IP address (never a name), never a multicast or unspecified one,
  inside ``HERMES_RUNTIME_RELAY_CIDRS`` when the chart gives the pod network's ranges; and
  when this pod knows its own address (``HERMES_RUNTIME_POD_IP``, always in the chart) never
  that one or a loopback one, on the same API and metrics ports as ours (one release renders
  one set of ports), so no listener the shell opens inside this pod can qualify;
- the proof: the stopping pod sends a fresh random nonce to the claimed address's metrics
  port (``GET /successor-proof?nonce=N``, served by ``endpoints.py``), and relays only if the
  answer is HMAC-SHA256, keyed with the release's API key, over the nonce and the address and
  ports the record claims. The answerer computes it over its own announced address, so a
  listener that forwards the nonce to a real pod gets a proof for that pod's address, not
  for its own, and is refused.

Why the API key: without the Kubernetes API the runtime has no other secret that every pod of
the release holds and no outsider does. Its limit: the shell of the pod runs as the user that
reads the key, so a shell that also controls a host the pod can reach on the API port passes
the proof; then it already holds the key the relayed clients would show it. The relay's
NetworkPolicy egress (the release's own pods only) closes that last step where a CNI enforces
it. Not used: the holder of the ``flock`` (``/proc/locks`` shows a pid of our own namespace
only while the process that took the lock lives, so a shell that forks past it hides).
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import hashlib
import hmac
import ipaddress
import json
import os
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from hermes_runtime.agent.httpget import http_get
from hermes_runtime.common.flock import try_flock
from hermes_runtime.common.logs import log_event

SUCCESSOR_LOCK_NAME = "successor.lock"
SUCCESSOR_PROOF_PATH = "/successor-proof"
NONCE_HEX = 64  # 32 random bytes
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network


@dataclass(frozen=True)
class Successor:
    """A pod waiting for the lock, ready to take over; where its API and metrics ports are
    (``host`` empty: it did not say, so nobody forwards clients to it)."""

    host: str = ""
    api_port: int = 0
    metrics_port: int = 0

    @property
    def reachable(self) -> bool:
        return bool(self.host and self.api_port)


def waiting_successor(state_dir: Path) -> Successor | None:
    """The process waiting for the data dir lock and ready to take over at once, if any."""
    try:
        fd = os.open(state_dir / SUCCESSOR_LOCK_NAME, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None  # never announced (no file yet)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return _read_successor(fd)
        return None
    finally:
        os.close(fd)  # also drops the shared lock, if we got it


def _read_successor(fd: int) -> Successor:
    with contextlib.suppress(OSError, ValueError, TypeError, KeyError):
        info = json.loads(os.pread(fd, 4096, 0) or b"{}")
        return Successor(str(info["host"]), int(info["api_port"]), int(info["metrics_port"]))
    return Successor()


class Announcement:
    """The successor's side: holds ``successor.lock`` from the moment ``ready()`` until
    ``close()`` (the data dir lock is ours), with ``me`` written into it."""

    def __init__(self, state_dir: Path, ready: Callable[[], bool], me: Successor) -> None:
        self._path = state_dir / SUCCESSOR_LOCK_NAME
        self._ready = ready
        self._me = me
        self._fd: int | None = None

    def __enter__(self) -> Announcement:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def announce(self) -> None:
        """Take the successor lock once ready (non-blocking: the data dir lock's wait calls
        this between its polls)."""
        if self._fd is not None or not self._ready():
            return
        try:
            fd = os.open(self._path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o640)
        except OSError:
            return  # best effort: without it the old pod just waits its preStop bound
        if not try_flock(fd):
            os.close(fd)
            return
        self._fd = fd
        record = json.dumps(dataclasses.asdict(self._me)).encode() + b"\n"
        with contextlib.suppress(OSError):  # without it, the old pod just does not forward
            os.ftruncate(fd, 0)
            os.pwrite(fd, record, 0)
        log_event("agent.lock.successor", lock=str(self._path), **dataclasses.asdict(self._me))


def ip_address_of(host: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    """``host`` as an address (an IPv4-mapped IPv6 one as IPv4); None for a name."""
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return None
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address


def valid_nonce(nonce: str) -> bool:
    """A nonce as ``RelayPolicy`` sends it: 64 lowercase hex digits, nothing else."""
    return len(nonce) == NONCE_HEX and all(c in "0123456789abcdef" for c in nonce)


def successor_proof(key: str, nonce: str, who: Successor) -> str:
    """HMAC-SHA256 keyed with the API key over the nonce and the address it vouches for."""
    message = f"hermes-runtime successor proof\n{nonce}\n{who.host}\n{who.api_port}\n"
    message += str(who.metrics_port)
    return hmac.new(key.encode(), message.encode(), hashlib.sha256).hexdigest()


def answer_proof(key: str, nonce: str, me: Successor) -> str | None:
    """The successor's answer to a nonce: the proof for its own announced address; None
    when it announces none (no pod IP) or has no key."""
    if not key or not me.reachable or not me.metrics_port or not valid_nonce(nonce):
        return None
    return successor_proof(key, nonce, me)


@dataclass(frozen=True)
class RelayPolicy:
    """Which announced successor a stopping pod may relay clients to (the module's rules):
    ``refusal`` checks the address, ``verify`` asks for the proof."""

    key: Callable[[], str] = lambda: ""  # the release's API key ("": none, never relay)
    own: Successor = Successor()  # this pod's own address and ports (host "": unknown)
    networks: tuple[IPNetwork, ...] = ()  # the pod network's ranges (empty: not checked)

    def refusal(self, successor: Successor) -> str | None:
        """Why ``successor``'s address is refused; None when it may be asked for a proof."""
        address = ip_address_of(successor.host)
        if address is None:
            return f"{successor.host!r} is no IP address"
        if address.is_multicast or address.is_unspecified or address.is_link_local:
            return f"{successor.host}: no pod address"
        if not successor.metrics_port:
            return f"{successor.host}: no metrics port to ask for a proof on"
        own = self.own
        if own.host and (address.is_loopback or address == ip_address_of(own.host)):
            return f"{successor.host} is this pod's own address"
        if self.networks and not any(address in network for network in self.networks):
            return f"{successor.host} is outside HERMES_RUNTIME_RELAY_CIDRS"
        ports = (successor.api_port, successor.metrics_port)
        if own.host and ports != (own.api_port, own.metrics_port):
            return f"ports {ports} are not this release's {(own.api_port, own.metrics_port)}"
        return None

    async def verify(self, successor: Successor, timeout: float) -> str | None:
        """None once the pod at ``successor``'s address proved it belongs to the release; why
        not otherwise. ``OSError`` while nothing answers there yet (ask again)."""
        key = self.key()
        if not key:
            return "this pod has no API key to check a proof with"
        nonce = secrets.token_hex(NONCE_HEX // 2)
        path = f"{SUCCESSOR_PROOF_PATH}?nonce={nonce}"
        status, body = await http_get(successor.host, successor.metrics_port, path, timeout)
        if status != 200:
            return f"{successor.host}:{successor.metrics_port} answered the proof with {status}"
        with contextlib.suppress(ValueError, TypeError, KeyError):
            proof = str(json.loads(body)["proof"])
            if hmac.compare_digest(proof, successor_proof(key, nonce, successor)):
                return None
        return f"{successor.host}:{successor.metrics_port} gave no valid proof for its address"
