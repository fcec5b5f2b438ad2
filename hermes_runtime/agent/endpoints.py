"""The entrypoint's HTTP endpoints for the kubelet and Prometheus: one port, two read-only paths.

- ``/metrics``: the ``AgentMetrics`` registry.
- ``/ready``: 200 only while the gateway answers ``/health`` (or is being replaced behind the
  front door, which holds requests meanwhile), the data volume has its reserve of free space
  (``datareserve.py``) and takes a new file, and LCM's database (when LCM is the context
  engine) answers a read; 503 with the failing checks otherwise, and from the moment the pod
  starts stopping.

Only ``GET`` of those two paths: any other path is 404, any other method 405, and nothing
here changes the pod's state. The port listens on every address (Prometheus and the kubelet
come from outside the pod), so whatever it serves, every pod of the cluster can call.

The stop is not asked for here. The container's preStop hook is an ``exec`` of ``hermes-runtime
agent pre-stop``, which reaches ``HandOver.pre_stop`` through the entrypoint's Unix socket
(``control.py``, ``hook.py``): only the kubelet starts it. Not an ``httpGet /pre-stop`` on this
port, though that needs no shell: one unauthenticated GET from any pod would turn the pod
unready for good. Once the pod stops, ``/ready`` says
what the hand-over says (``HandOver.stop_verdict``, ``handover.py``) instead of its checks.

Served on the entrypoint's event loop (plain ``asyncio`` streams: two GET paths need no web
framework); the checks that block on the filesystem (a write to the data volume, a read of
``lcm.db``) and ``/metrics`` (its collectors read the volume) run on worker threads, so a
hung volume never stalls the loop, which also carries every API client (``frontdoor.py``).
One request per connection, as before (HTTP/1.0: the answer closes it).

The kubelet's readiness probe must get its answer while other pods flood the port or hold
connections open byte by byte: connections are admitted under ``common/boundedhttp.py``'s caps
(total, per peer, time to send the request head; a newcomer takes the slot of the oldest
connection still sending its head), and the work behind the answers is shared: concurrent
``/ready`` requests wait for one run of the checks, concurrent ``/metrics`` for one rendering,
so a flood never queues work ahead of the probe on the worker threads.

A third path, ``/successor-proof?nonce=N``, answers a stopping pod of the release that is about
to relay its clients here (``successor.py``): a keyed proof that this pod is the one at the
address it announced. It reads nothing and changes nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import threading
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, TypeVar
from urllib.parse import parse_qs

import apsw
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from hermes_runtime.agent.datareserve import OK, DataReserve
from hermes_runtime.agent.httpget import http_get
from hermes_runtime.agent.metrics import AgentMetrics
from hermes_runtime.agent.successor import SUCCESSOR_PROOF_PATH, valid_nonce
from hermes_runtime.common.boundedhttp import REFUSAL, ServerLimits, Slots
from hermes_runtime.common.errors import RuntimeFailure
from hermes_runtime.common.logs import log_event
from hermes_runtime.common.sqlite import connect
from hermes_runtime.lcm.config import selected_config

PROBE_TIMEOUT = 2.0  # seconds per check; the kubelet's own timeout is the outer bound
MAX_DISCARDED_BODY = 64 * 1024  # a refused request's body read before closing
DISCARD_SECONDS = 2.0  # to send that body
MAX_HEADERS = 100
REASONS = {200: "OK", 400: "Bad Request", 404: "Not Found", 405: "Method Not Allowed"}
REASONS[503] = "Service Unavailable"


@dataclass
class Readiness:
    """What ``/ready`` checks: the gateway's ``/health`` (on ``gateway``, host and port), the
    data volume, LCM's database; or, once the pod stops, the hand-over's verdict."""

    data_dir: Path
    state_dir: Path
    gateway: tuple[str, int]
    gateway_running: Callable[[], bool]
    # A replacement gateway is on its way and the front door holds requests until it answers.
    gateway_restarting: Callable[[], bool] = lambda: False
    stop_verdict: Callable[[], dict[str, str] | None] = lambda: None
    reserve: DataReserve | None = None  # the data volume's free space against its reserve

    async def checks(self) -> dict[str, str]:
        """Each check's verdict, ``"ok"`` or why not; the pod is ready when all are ``ok``."""
        verdict = self.stop_verdict()
        if verdict is not None:
            return verdict
        gateway, data, lcm = await asyncio.gather(
            self._gateway(), asyncio.to_thread(self._data_volume), asyncio.to_thread(self._lcm)
        )
        return {"gateway": gateway, "data": data, "lcm": lcm}

    async def _gateway(self) -> str:
        verdict = await self._gateway_health()
        if verdict != "ok" and self.gateway_restarting():
            return "ok"  # requests wait at the front door for the new gateway: still ready
        return verdict

    async def _gateway_health(self) -> str:
        if not self.gateway_running():
            return "the gateway process is not running"
        host, port = self.gateway
        url = f"http://{host}:{port}/health"
        try:
            status, body = await http_get(host, port, "/health", PROBE_TIMEOUT)
            health = json.loads(body).get("status") if status == 200 else f"HTTP {status}"
        except TimeoutError:
            return f"{url}: no answer within {PROBE_TIMEOUT:g} s"
        except (OSError, ValueError, AttributeError) as exc:
            return f"{url}: {exc}"
        return "ok" if health == "ok" else f"{url}: status {health!r}"

    def _data_volume(self) -> str:
        """Free space above the reserve, and a new file written with fsync: catches a full,
        read-only or vanished volume.

        A new file each time (then removed): rewriting one probe file in place reuses its
        block, which a full volume still allows, so the check would answer ok on a volume
        that refuses every new file."""
        if self.reserve is not None and (verdict := self.reserve.measure()) != OK:
            return verdict
        probe = self.state_dir / f".ready-probe-{os.getpid()}-{threading.get_ident()}"
        try:
            fd = os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            try:
                os.write(fd, b"ok\n")
                os.fsync(fd)
            finally:
                os.close(fd)
        except OSError as exc:
            return f"{probe}: {exc.strerror}"
        finally:
            with contextlib.suppress(OSError):
                probe.unlink()
        return OK

    def _lcm(self) -> str:
        """With LCM as the context engine, ``lcm.db`` (once the engine made it) must be
        readable: read-only, so the probe never creates nor changes anything."""
        try:
            config = selected_config(self.data_dir)
        except RuntimeFailure as exc:  # a bad lcm: section: the engine refuses it too
            return str(exc)
        if config is None:
            return "ok"
        db = config.db_path  # where the engine keeps it (``lcm.db_path`` moves it)
        if not db.exists():
            return "ok"  # created by the engine with the first session
        try:
            conn = connect(db, readonly=True, busy_timeout_ms=int(PROBE_TIMEOUT * 1000))
            try:
                conn.execute("PRAGMA schema_version").fetchall()
            finally:
                conn.close()
        except apsw.Error as exc:
            return f"{db}: {exc}"
        return "ok"


class Endpoints:
    """``/metrics`` and ``/ready`` on ``port``; ``start`` binds (an ``OSError`` when taken).

    ``prove(nonce)`` answers ``/successor-proof`` (None: this pod cannot prove, 404)."""

    def __init__(
        self,
        metrics: AgentMetrics,
        readiness: Readiness,
        port: int,
        host: str = "0.0.0.0",
        *,
        limits: ServerLimits | None = None,
        prove: Callable[[str], str | None] = lambda _nonce: None,
    ) -> None:
        self._metrics = metrics
        self._address = (host, port)
        self._server: asyncio.Server | None = None
        self.slots = Slots(limits or ServerLimits(), name=f"metrics port {port}")
        self._prove = prove
        self._checks = Shared(readiness.checks)
        self._rendering = Shared(lambda: asyncio.to_thread(generate_latest, metrics.registry))

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._handle, *self._address, backlog=512)

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer = writer.get_extra_info("peername") or ("?",)
        slot = self.slots.admit(str(peer[0]), writer.transport.abort)
        if slot is None:  # every slot serves a complete request: no at once, no queue
            writer.write(REFUSAL)
            writer.close()
            return
        try:
            try:
                request = await asyncio.wait_for(
                    _read_request(reader), self.slots.limits.head_seconds
                )
            except (TimeoutError, ValueError, asyncio.IncompleteReadError):
                request = None
            if writer.is_closing():
                return  # evicted for a newcomer while it trickled its head
            if request is None:
                await _send(writer, "GET", 400, {"error": "no HTTP request"})
                return
            slot.head_complete()
            await self._answer(reader, writer, *request)
        except OSError:
            pass  # the client went away
        except Exception as exc:  # a bug: log it, never end the entrypoint for it
            log_event("agent.endpoints.failed", level="error", error=repr(exc))
        finally:
            slot.release()
            writer.close()

    async def _answer(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        method: str,
        target: str,
        headers: dict[str, str],
    ) -> None:
        path, _, query = target.partition("?")
        if method != "GET":
            await _discard_body(reader, headers)
            await _send(
                writer, method, 405, {"error": f"{method} not allowed: read-only, GET only"}
            )
        elif path == "/metrics":
            body = await self._rendering()
            await _send_bytes(writer, method, 200, body, CONTENT_TYPE_LATEST)
        elif path == "/ready":
            checks = await self._checks()
            ok = all(verdict == "ok" for verdict in checks.values())
            self._metrics.ready.set(1.0 if ok else 0.0)
            await _send(writer, method, 200 if ok else 503, {"ready": ok, "checks": checks})
        elif path == SUCCESSOR_PROOF_PATH:
            nonce = parse_qs(query).get("nonce", [""])[0]
            proof = self._prove(nonce) if valid_nonce(nonce) else None
            if proof is None:
                await _send(writer, method, 404, {"error": "no successor proof here"})
            else:
                await _send(writer, method, 200, {"proof": proof})
        else:
            await _send(writer, method, 404, {"error": f"no such path {path}"})


T = TypeVar("T")


class Shared(Generic[T]):
    """One run of ``work`` shared by every caller that comes while it runs: a flood of
    requests costs one run at a time, never a queue of them."""

    def __init__(self, work: Callable[[], Awaitable[T]]) -> None:
        self._work = work
        self._running: asyncio.Future[T] | None = None

    async def __call__(self) -> T:
        if self._running is None or self._running.done():
            self._running = asyncio.ensure_future(self._work())
        return await asyncio.shield(self._running)


async def _read_request(reader: asyncio.StreamReader) -> tuple[str, str, dict[str, str]] | None:
    """``(method, target, headers)`` of one request; None when malformed."""
    words = (await reader.readline()).decode("latin-1").split()
    if len(words) != 3 or not words[2].startswith("HTTP/"):
        return None
    headers: dict[str, str] = {}
    for _ in range(MAX_HEADERS):
        line = (await reader.readline()).decode("latin-1")
        if line in ("\r\n", "\n", ""):
            return words[0], words[1], headers
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    return None


async def _discard_body(reader: asyncio.StreamReader, headers: dict[str, str]) -> None:
    """Read a small body, so closing does not reset the connection under the answer."""
    try:
        length = int(headers.get("content-length") or 0)
    except ValueError:
        return
    if 0 < length <= MAX_DISCARDED_BODY:
        with contextlib.suppress(asyncio.IncompleteReadError, TimeoutError):
            await asyncio.wait_for(reader.readexactly(length), DISCARD_SECONDS)


async def _send(
    writer: asyncio.StreamWriter, method: str, status: int, payload: dict[str, Any]
) -> None:
    await _send_bytes(writer, method, status, json.dumps(payload).encode(), "application/json")


async def _send_bytes(
    writer: asyncio.StreamWriter, method: str, status: int, body: bytes, content_type: str
) -> None:
    head = [
        f"HTTP/1.0 {status} {REASONS[status]}",
        f"Content-Type: {content_type}",
        f"Content-Length: {len(body)}",
        "Connection: close",
    ]
    if status == 405:
        head.append("Allow: GET")
    writer.write(("\r\n".join(head) + "\r\n\r\n").encode())
    if method != "HEAD":
        writer.write(body)
    await writer.drain()
