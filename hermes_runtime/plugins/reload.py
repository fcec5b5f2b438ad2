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

To be less disruptive than that default (which interrupts running turns at
once), ``GatewayRestarter`` first quiesces the gateway through Hermes' own
external-drain marker and waits for in-flight work to finish.
"""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from hermes_runtime.common.atomic import atomic_write_text
from hermes_runtime.common.errors import RuntimeFailure
from hermes_runtime.common.logs import log_event
from hermes_runtime.plugins.link import LinkReport

RESTART_EXIT_CODE = 75
PID_FILE = "gateway.pid"
STATUS_FILE = "gateway_state.json"
DRAIN_MARKER = ".drain_request.json"
DRAIN_PRINCIPAL = "hermes-runtime-plugins"


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
    """An ``on_change`` callback for ``watch``: quiesce, then restart gracefully.

    1. Engage Hermes' own external drain (``D/.drain_request.json``, the
       contract in ``gateway/drain_control.py``): the gateway stops accepting
       NEW turns (the API server answers 503 + Retry-After: 1) and lets
       in-flight turns finish, refreshing ``active_agents`` every second.
    2. Wait until no agent work is in flight (chat turns, API-server runs,
       cron jobs), at most ``max_defer_seconds``.
    3. SIGUSR1: the gateway drains (nothing left), exits 75, the supervisor
       starts it again; then remove our drain marker (a shutdown in progress
       is never reverted to running by that).

    A drain someone else started is left alone. ``pid`` is a function so the
    entrypoint can hand over the PID of the gateway child it supervises; by
    default it is read from ``D/gateway.pid``.
    """

    data_dir: Path
    pid: Callable[[], int] | None = None
    max_defer_seconds: float = 120.0
    drain_engage_seconds: float = 5.0
    poll_seconds: float = 0.1
    restarts: list[float] = field(default_factory=list)

    def __post_init__(self) -> None:
        clear_own_drain(self.data_dir)

    def __call__(self, report: LinkReport) -> None:
        pid = self.pid() if self.pid is not None else gateway_pid(self.data_dir)
        started = time.monotonic()
        ours = begin_drain(self.data_dir)
        try:
            if ours:
                self._wait_for(lambda: _drain_engaged(self.data_dir), self.drain_engage_seconds)
            idle = self._wait_for(
                lambda: active_agent_count(self.data_dir) == 0, self.max_defer_seconds
            )
            log_event(
                "plugins.reload.restart_gateway",
                pid=pid,
                idle=idle,
                quiesce_s=round(time.monotonic() - started, 3),
                commits=report.commits(),
            )
            request_gateway_restart(pid)
            self.restarts.append(time.time())
            self._wait_for(lambda: not _process_alive(pid), 60.0)
        finally:
            if ours:
                clear_own_drain(self.data_dir)

    def _idle(self) -> bool:
        return not active_agent_count(self.data_dir)

    def _wait_for(self, condition: Callable[[], bool], seconds: float) -> bool:
        deadline = time.monotonic() + seconds
        while not condition():
            if time.monotonic() >= deadline:
                return False
            time.sleep(self.poll_seconds)
        return True


def begin_drain(data_dir: Path) -> bool:
    """Write our drain marker unless a drain is already requested; True if we wrote it."""
    marker = Path(data_dir) / DRAIN_MARKER
    if marker.exists():
        return False
    payload = {
        "action": "drain",
        "requested_at": datetime.now(UTC).isoformat(),
        "principal": DRAIN_PRINCIPAL,
        "epoch": _instantiation_epoch(),
        "suppress_notification": True,
    }
    atomic_write_text(marker, json.dumps(payload))
    return True


def clear_own_drain(data_dir: Path) -> None:
    """Remove the drain marker if we wrote it (also a leftover from a crashed watcher)."""
    marker = Path(data_dir) / DRAIN_MARKER
    try:
        payload = json.loads(marker.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return
    if isinstance(payload, dict) and payload.get("principal") == DRAIN_PRINCIPAL:
        marker.unlink(missing_ok=True)


def _drain_engaged(data_dir: Path) -> bool:
    try:
        payload = json.loads((Path(data_dir) / STATUS_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(payload, dict) and payload.get("gateway_state") == "draining"


def _process_alive(pid: int) -> bool:
    """False once the gateway has exited (a zombie awaiting its parent counts as exited)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[-1].split()[0] != "Z"


def _instantiation_epoch() -> str:
    """Hermes' epoch for this container (boot id + PID 1 start): a marker that outlives
    the pod is ignored by the next one, so a crash here never wedges a new pod."""
    try:
        boot_id = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
        pid1_start = Path("/proc/1/stat").read_text().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return ""
    return f"{boot_id}:{pid1_start}"
