"""Make a running Hermes gateway pick up new plugin code, as gently as Hermes allows.

Hermes 0.19.0 has no in-process plugin reload a gateway honours: the loader
(``hermes_cli.plugins.discover_plugins(force=True)``) re-imports modules, but
cached agents keep the old tool objects and there is no control channel into
a running gateway (``gateway/drain_control.py``). Its supported path is a
graceful restart: SIGUSR1 makes the gateway drain in-flight turns (for
``agent.restart_drain_timeout`` seconds, default 0), mark still-running
sessions ``resume_pending`` and exit with code 75
(``gateway/restart.py: GATEWAY_SERVICE_RESTART_EXIT_CODE``), which a
supervisor answers by starting it again; the new process imports the plugin
through ``D/plugins/<name>`` -> ``current`` -> the new worktree.

To be less disruptive than that default, ``GatewayRestarter`` first waits
(bounded) until ``gateway_state.json`` reports no active agent work (chat
turns, API-server runs and cron jobs), then signals.
"""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from hermes_runtime.common.errors import RuntimeFailure
from hermes_runtime.common.logs import log_event
from hermes_runtime.plugins.link import LinkReport

RESTART_EXIT_CODE = 75
PID_FILE = "gateway.pid"
STATUS_FILE = "gateway_state.json"


def gateway_pid(data_dir: Path) -> int:
    """The running gateway's PID from ``D/gateway.pid`` (Hermes writes it as JSON)."""
    path = Path(data_dir) / PID_FILE
    try:
        text = path.read_text(encoding="utf-8").strip()
    except OSError as exc:
        raise RuntimeFailure(f"{path}: cannot read the gateway PID: {exc}") from exc
    try:
        value = json.loads(text)
        pid = int(value["pid"]) if isinstance(value, dict) else int(value)
    except (ValueError, KeyError, TypeError) as exc:
        raise RuntimeFailure(f"{path}: no PID in {text[:80]!r}") from exc
    if not _is_hermes_gateway(pid):
        raise RuntimeFailure(
            f"{path}: PID {pid} is not a Hermes gateway in this PID namespace "
            "(run the watcher in the agent container, or share the pod's process namespace)"
        )
    return pid


def _is_hermes_gateway(pid: int) -> bool:
    """SIGUSR1's default action kills: never send it to a PID that is not the gateway."""
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    words = [Path(arg.decode(errors="replace")).name for arg in argv if arg]
    return "gateway" in words and any(w.startswith("hermes") for w in words)


def active_agent_count(data_dir: Path) -> int | None:
    """In-flight agent work from ``D/gateway_state.json``, or ``None`` if unknown."""
    try:
        payload = json.loads((Path(data_dir) / STATUS_FILE).read_text(encoding="utf-8"))
        return int(payload.get("active_agents", 0))
    except (OSError, ValueError, TypeError, AttributeError):
        return None


def request_gateway_restart(pid: int) -> None:
    """Ask the gateway to drain and exit 75 so its supervisor restarts it (SIGUSR1)."""
    try:
        os.kill(pid, signal.SIGUSR1)
    except ProcessLookupError as exc:
        raise RuntimeFailure(f"gateway PID {pid} is not running") from exc
    except PermissionError as exc:
        raise RuntimeFailure(f"not allowed to signal gateway PID {pid}") from exc


@dataclass
class GatewayRestarter:
    """An ``on_change`` callback for ``watch``: wait for idle, then restart gracefully.

    ``pid`` is a function so the entrypoint can hand over the PID of the
    gateway child it currently supervises; by default it is read from
    ``D/gateway.pid``.
    """

    data_dir: Path
    pid: Callable[[], int] | None = None
    max_defer_seconds: float = 120.0
    poll_seconds: float = 0.25
    restarts: list[float] = field(default_factory=list)

    def __call__(self, report: LinkReport) -> None:
        waited = self.wait_for_idle()
        pid = self.pid() if self.pid is not None else gateway_pid(self.data_dir)
        log_event(
            "plugins.reload.restart_gateway",
            pid=pid,
            waited_for_idle_s=round(waited, 3),
            commits=report.commits(),
        )
        request_gateway_restart(pid)
        self.restarts.append(time.time())

    def wait_for_idle(self) -> float:
        """Wait until no agent work is in flight, at most ``max_defer_seconds``."""
        started = time.monotonic()
        deadline = started + self.max_defer_seconds
        while time.monotonic() < deadline:
            active = active_agent_count(self.data_dir)
            if not active:
                break
            time.sleep(self.poll_seconds)
        return time.monotonic() - started
