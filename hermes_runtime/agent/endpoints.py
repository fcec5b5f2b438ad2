"""The entrypoint's HTTP endpoints for the kubelet and Prometheus: one port, three paths.

- ``/metrics``: the ``AgentMetrics`` registry.
- ``/ready``: 200 only while the gateway answers ``/health`` (or is being replaced behind the
  front door, which holds requests meanwhile), the data volume takes a write and LCM's
  database (when LCM is the context engine) answers a read; 503 with the failing checks
  otherwise, and from the moment the pod starts stopping.
- ``/pre-stop``: the container's preStop hook. With one replica there is no other pod to
  send clients to, so the pod keeps serving while it waits (at most ``handover_seconds``) for
  its successor: a new pod on the same volume, waiting for the data dir lock with its gateway
  imported (``datalock.waiting_successor``). Then the hook returns and the kubelet sends
  SIGTERM: the gateway drains and exits, the successor takes the lock and starts.

  With a successor that said where it is, this pod stays ready (Kubernetes keeps sending
  clients to a terminating pod that is ready while no other one is) and its front door
  forwards new clients to the successor's, which holds them until its gateway answers; once
  the successor's ``/ready`` answers, this pod turns unready and leaves ``prestop_seconds``
  later. Without one, ``/ready`` turns 503 at once and the pod stays reachable (closing new
  connections at once, never letting them hang) until ``prestop_seconds`` after that, so the
  endpoints drop it before its address vanishes (``runner.py``).

Why the hook is ``httpGet`` and not ``exec sleep``: it runs on Kubernetes 1.27 (no ``sleep``
action), needs no shell in the image, and flips readiness in the same step.
"""

from __future__ import annotations

import json
import os
import threading
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import apsw
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from ruamel.yaml import YAML

from hermes_runtime.agent.datalock import Successor
from hermes_runtime.agent.metrics import AgentMetrics
from hermes_runtime.common.logs import log_event
from hermes_runtime.common.sqlite import connect
from hermes_runtime.lcm import LcmConfig

PROBE_TIMEOUT = 2.0  # seconds per check; the kubelet's own timeout is the outer bound
RELAY_POLL_SECONDS = 0.2  # how often a stopping pod asks its successor whether it is ready


@dataclass
class Readiness:
    """What ``/ready`` checks, and the hand-over's state. ``stop_requested`` is the supervisor's
    SIGTERM flag; the preStop hook (``hand_over``) sets ``pre_stop`` before that. From then on
    the pod is unready, unless it forwards new clients to a successor that is not ready yet."""

    data_dir: Path
    state_dir: Path
    health_url: str
    gateway_running: Callable[[], bool]
    stop_requested: Callable[[], bool]
    # A replacement gateway is on its way and the front door holds requests until it answers.
    gateway_restarting: Callable[[], bool] = lambda: False
    prestop_seconds: float = 0.0
    # A warm successor pod waiting for the data dir lock (datalock.waiting_successor).
    successor: Callable[[], Successor | None] = lambda: None
    handover_seconds: float = 0.0
    pre_stop: threading.Event = field(default_factory=threading.Event)
    stop_began: float | None = None  # time.monotonic() when the hand-over ended its wait
    relay: Successor | None = None  # the successor new clients are forwarded to
    successor_ready_at: float | None = None  # when its /ready first answered 200

    def checks(self) -> dict[str, str]:
        """Each check's verdict, ``"ok"`` or why not; the pod is ready when all are ``ok``."""
        if self.pre_stop.is_set() or self.stop_requested():
            if self.relay is not None and not self.successor_ready():
                return {"handover": "ok"}  # still the way in: new clients go to the successor
            return {"stopping": "the pod is stopping"}
        return {
            "gateway": self._gateway(),
            "data": self._data_volume(),
            "lcm": self._lcm(),
        }

    def begin_stop(self, **fields: Any) -> None:
        if not self.pre_stop.is_set():
            self.stop_began = time.monotonic()
            self.pre_stop.set()
            log_event("agent.pre_stop", reachable_seconds=self.prestop_seconds, **fields)

    def hand_over(self, poll_seconds: float = 0.1) -> dict[str, Any]:
        """The preStop hook: wait (still serving) for a warm successor, then stop."""
        started = time.monotonic()
        deadline = started + self.handover_seconds
        successor = self.successor()
        while successor is None and time.monotonic() < deadline and not self.stop_requested():
            time.sleep(poll_seconds)
            successor = self.successor()
        if successor is not None and successor.reachable:
            self.relay = successor
        waited = round(time.monotonic() - started, 2)
        self.begin_stop(
            successor=successor is not None,
            relay=f"{successor.host}:{successor.api_port}" if self.relay and successor else None,
            waited_seconds=waited,
        )
        return {"stopping": True, "successor": successor is not None, "waited_seconds": waited}

    def relay_address(self) -> tuple[str, int] | None:
        """Where the front door sends new clients once the pod stops (None: nowhere)."""
        relay = self.relay
        return (relay.host, relay.api_port) if relay is not None else None

    def successor_ready(self) -> bool:
        """Whether the successor's ``/ready`` has answered 200 (asked until it has)."""
        relay = self.relay
        if self.successor_ready_at is None and relay is not None:
            url = f"http://{_host(relay.host)}:{relay.metrics_port}/ready"
            try:
                with urllib.request.urlopen(url, timeout=PROBE_TIMEOUT) as response:
                    ok = response.status == 200
            except (OSError, ValueError):
                ok = False
            if ok:
                self.successor_ready_at = time.monotonic()
                log_event("agent.handover.successor_ready", successor=relay.host)
        return self.successor_ready_at is not None

    def reachable_for(self) -> float:
        """Seconds this pod must stay reachable yet: while it forwards to a successor that is
        not ready, then ``prestop_seconds`` after turning unready (the kubelet's readiness
        failures and kube-proxy's sync take that long to drop it)."""
        if self.stop_began is None:
            return 0.0
        unready_since: float | None = self.stop_began
        if self.relay is not None:
            unready_since = self.successor_ready_at if self.successor_ready() else None
        if unready_since is None:
            return RELAY_POLL_SECONDS  # still the way in to a successor that is not ready
        return max(0.0, unready_since + self.prestop_seconds - time.monotonic())

    def _gateway(self) -> str:
        verdict = self._gateway_health()
        if verdict != "ok" and self.gateway_restarting():
            return "ok"  # requests wait at the front door for the new gateway: still ready
        return verdict

    def _gateway_health(self) -> str:
        if not self.gateway_running():
            return "the gateway process is not running"
        try:
            with urllib.request.urlopen(self.health_url, timeout=PROBE_TIMEOUT) as response:
                status = json.loads(response.read()).get("status")
        except (OSError, ValueError) as exc:
            return f"{self.health_url}: {exc}"
        return "ok" if status == "ok" else f"{self.health_url}: status {status!r}"

    def _data_volume(self) -> str:
        """A small write with fsync: catches a read-only, full or vanished volume."""
        probe = self.state_dir / ".ready-probe"
        try:
            fd = os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            try:
                os.write(fd, b"ok\n")
                os.fsync(fd)
            finally:
                os.close(fd)
        except OSError as exc:
            return f"{probe}: {exc.strerror}"
        return "ok"

    def _lcm(self) -> str:
        """With LCM as the context engine, ``lcm.db`` (once the engine made it) must be
        readable: read-only, so the probe never creates nor changes anything."""
        if not _lcm_enabled(self.data_dir / "config.yaml"):
            return "ok"
        db = LcmConfig.for_home(self.data_dir).db_path
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


def _host(host: str) -> str:
    return f"[{host}]" if ":" in host else host  # an IPv6 pod address in a URL


def _lcm_enabled(config_yaml: Path) -> bool:
    try:
        config = YAML(typ="safe").load(config_yaml.read_text(encoding="utf-8")) or {}
    except (OSError, ValueError):
        return False
    context = config.get("context") if isinstance(config, dict) else None
    return isinstance(context, dict) and context.get("engine") == "lcm"


def serve_endpoints(
    metrics: AgentMetrics, readiness: Readiness, port: int, host: str = "0.0.0.0"
) -> ThreadingHTTPServer:
    """Serve the three paths on a daemon thread; ``.shutdown()`` stops it."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            path = self.path.split("?", 1)[0]
            if path == "/metrics":
                self._send(200, generate_latest(metrics.registry), CONTENT_TYPE_LATEST)
            elif path == "/ready":
                checks = readiness.checks()
                ok = all(verdict == "ok" for verdict in checks.values())
                self._json(200 if ok else 503, {"ready": ok, "checks": checks})
            elif path == "/pre-stop":
                self._json(200, readiness.hand_over())
            else:
                self._json(404, {"error": f"no such path {path}"})

        def _json(self, status: int, payload: dict[str, Any]) -> None:
            self._send(status, json.dumps(payload).encode(), "application/json")

        def _send(self, status: int, body: bytes, content_type: str) -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            pass  # the kubelet probes every second: no access log

    server = ThreadingHTTPServer((host, port), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, name="endpoints", daemon=True).start()
    return server
