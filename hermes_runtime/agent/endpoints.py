"""The entrypoint's HTTP endpoints for the kubelet and Prometheus: one port, three paths.

- ``/metrics``: the ``AgentMetrics`` registry.
- ``/ready``: 200 only while the gateway answers ``/health`` (or is being replaced behind the
  front door, which holds requests meanwhile), the data volume takes a write and LCM's
  database (when LCM is the context engine) answers a read; 503 with the failing checks
  otherwise, and from the moment the pod starts stopping.
- ``/pre-stop``: the container's preStop hook. It turns ``/ready`` to 503 at once, then holds
  the kubelet for ``prestop_seconds`` so the endpoints drop the pod while the gateway still
  serves; only then does the kubelet send SIGTERM and the gateway drain.

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

from hermes_runtime.agent.metrics import AgentMetrics
from hermes_runtime.common.logs import log_event
from hermes_runtime.common.sqlite import connect
from hermes_runtime.lcm import LcmConfig

PROBE_TIMEOUT = 2.0  # seconds per check; the kubelet's own timeout is the outer bound


@dataclass
class Readiness:
    """What ``/ready`` checks. ``stop_requested`` is the supervisor's SIGTERM flag; the preStop
    hook sets ``pre_stop`` before that, so the pod is unready before the gateway stops."""

    data_dir: Path
    state_dir: Path
    health_url: str
    gateway_running: Callable[[], bool]
    stop_requested: Callable[[], bool]
    # A replacement gateway is on its way and the front door holds requests until it answers.
    gateway_restarting: Callable[[], bool] = lambda: False
    prestop_seconds: float = 0.0
    pre_stop: threading.Event = field(default_factory=threading.Event)

    def checks(self) -> dict[str, str]:
        """Each check's verdict, ``"ok"`` or why not; the pod is ready when all are ``ok``."""
        if self.pre_stop.is_set() or self.stop_requested():
            return {"stopping": "the pod is stopping"}
        return {
            "gateway": self._gateway(),
            "data": self._data_volume(),
            "lcm": self._lcm(),
        }

    def begin_stop(self) -> None:
        if not self.pre_stop.is_set():
            self.pre_stop.set()
            log_event("agent.pre_stop", wait_seconds=self.prestop_seconds)

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
                readiness.begin_stop()
                time.sleep(readiness.prestop_seconds)
                self._json(200, {"stopping": True, "waited_seconds": readiness.prestop_seconds})
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
