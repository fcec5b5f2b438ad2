"""The one way a running Hermes gateway is restarted: quiesce, then SIGUSR1, then exit 75.

Used for every planned restart: new plugin code, rotated secrets, SIGHUP (through
``Supervisor.request_restart``), and by ``plugins watch`` outside the entrypoint
(``GatewayRestarter``).

Why a restart: Hermes 0.19.0 has no in-process plugin reload a gateway honours (the
loader re-imports modules, but cached agents keep the old tool objects, and there is no
control channel into a running gateway, ``gateway/drain_control.py``), and its env (the
secrets) is read at start. Its supported path: SIGUSR1 makes the gateway drain in-flight
turns (for ``agent.restart_drain_timeout``), mark still-running sessions ``resume_pending``
and exit with code 75 (``gateway/restart.py: GATEWAY_SERVICE_RESTART_EXIT_CODE``), which a
supervisor answers by starting it again.

To be gentler than that, ``quiesced`` first engages Hermes' own external-drain marker (no
new turns: 503 + Retry-After) and waits for in-flight work to finish; the marker is removed
once the gateway has exited, before the new one starts.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from hermes_runtime.common.atomic import atomic_write_text
from hermes_runtime.common.errors import RuntimeFailure
from hermes_runtime.common.logs import log_event
from hermes_runtime.plugins.link import LinkReport

GATEWAY_RESTART_EXIT_CODE = 75  # gateway/restart.py GATEWAY_SERVICE_RESTART_EXIT_CODE
PID_FILE = "gateway.pid"
STATUS_FILE = "gateway_state.json"
DRAIN_MARKER = ".drain_request.json"
DRAIN_PRINCIPAL = "hermes-runtime"


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


@contextlib.contextmanager
def quiesced(
    data_dir: Path,
    *,
    max_defer_seconds: float = 120.0,
    engage_seconds: float = 5.0,
    poll_seconds: float = 0.1,
    abort: Callable[[], bool] = lambda: False,
) -> Iterator[bool]:
    """Hold the gateway in Hermes' external drain while the block restarts it.

    1. Write the drain marker (``D/.drain_request.json``, the contract in
       ``gateway/drain_control.py``) unless someone else's drain is on: the gateway stops
       accepting NEW turns and lets in-flight turns finish, refreshing ``active_agents``.
    2. Wait until no agent work is in flight, at most ``max_defer_seconds`` (or until
       ``abort()``, e.g. a SIGTERM); yields whether the gateway got idle.
    3. After the block (which signals the gateway and waits for its exit), remove our
       marker: a shutdown in progress is never reverted to running by that.
    """
    ours = begin_drain(data_dir)
    try:
        if ours:
            _wait_for(lambda: _drain_engaged(data_dir), engage_seconds, poll_seconds, abort)
        idle = _wait_for(
            lambda: active_agent_count(data_dir) == 0, max_defer_seconds, poll_seconds, abort
        )
        yield idle
    finally:
        if ours:
            clear_own_drain(data_dir)


def _wait_for(
    condition: Callable[[], bool], seconds: float, poll: float, abort: Callable[[], bool]
) -> bool:
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() >= deadline or abort():
            return False
        time.sleep(poll)
    return True


@dataclass
class GatewayRestarter:
    """An ``on_change`` for ``plugins watch`` when no entrypoint supervises the gateway:
    ``quiesced``, SIGUSR1, wait for the exit; the gateway's own supervisor (systemd, a
    shell loop) starts it again on exit 75.

    ``pid`` is a function returning the gateway's PID; by default it is read from
    ``D/gateway.pid``. Inside the agent image the entrypoint's ``Supervisor`` does the
    same through ``request_restart``.
    """

    data_dir: Path
    pid: Callable[[], int] | None = None
    max_defer_seconds: float = 120.0
    poll_seconds: float = 0.1
    restarts: list[float] = field(default_factory=list)

    def __post_init__(self) -> None:
        clear_own_drain(self.data_dir)

    def __call__(self, report: LinkReport) -> None:
        pid = self.pid() if self.pid is not None else gateway_pid(self.data_dir)
        started = time.monotonic()
        with quiesced(
            self.data_dir, max_defer_seconds=self.max_defer_seconds, poll_seconds=self.poll_seconds
        ) as idle:
            log_event(
                "agent.restart.gateway",
                pid=pid,
                idle=idle,
                quiesce_s=round(time.monotonic() - started, 3),
                commits=report.commits(),
            )
            request_gateway_restart(pid)
            self.restarts.append(time.time())
            _wait_for(lambda: not _process_alive(pid), 60.0, self.poll_seconds, lambda: False)


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
