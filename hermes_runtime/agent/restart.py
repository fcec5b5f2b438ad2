"""The one way a running Hermes gateway is restarted: quiesce, then SIGUSR1, then exit 75.

Used for every planned restart: new plugin code, rotated secrets, SIGHUP (through
``Supervisor.request_restart``), and by ``plugins watch`` outside the entrypoint
(``GatewayRestarter``). Both quiesce with ``quiesced`` and signal the gateway and wait for its
exit with ``signal_and_wait`` (the exit seen through a pidfd, ``process_exited``); how long
the exit may take comes from the settings (``AgentSettings.stop_budget``), never a constant.

Why a restart: Hermes 0.19.0 has no in-process plugin reload a gateway honours (the
loader re-imports modules, but cached agents keep the old tool objects, and there is no
control channel into a running gateway, ``gateway/drain_control.py``), and its env (the
secrets) is read at start. Its supported path: SIGUSR1 makes the gateway drain in-flight
turns (for ``agent.restart_drain_timeout``), mark still-running sessions ``resume_pending``
and exit with code 75 (``gateway/restart.py: GATEWAY_SERVICE_RESTART_EXIT_CODE``), which a
supervisor answers by starting it again.

To be gentler than that, ``quiesced`` first engages Hermes' own external-drain marker (no
new turns: 503 + Retry-After) and waits for in-flight work to finish; the marker is removed
once the gateway has exited, before the new one starts. The marker is written by Hermes' own
function, through the adapter ``compat/drain.py``, which checks the installed Hermes first:
on a release or shape it does not know, the restart skips the quiesce (logged) and relies on
Hermes' SIGUSR1 drain alone.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path

from hermes_runtime.agent.settings import AgentSettings
from hermes_runtime.common.errors import RuntimeFailure
from hermes_runtime.common.logs import log_event
from hermes_runtime.compat import DRAIN_MARKER, RESTART_EXIT_CODE, STATUS_FILE, drain_control
from hermes_runtime.plugins.link import LinkReport

GATEWAY_RESTART_EXIT_CODE = RESTART_EXIT_CODE
PID_FILE = "gateway.pid"
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


def request_gateway_restart(pid: int, signum: int = signal.SIGUSR1) -> None:
    """Ask the gateway to drain and exit 75 so its supervisor restarts it (SIGUSR1), or send
    it another signal (SIGTERM: drain and stop)."""
    try:
        os.kill(pid, signum)
    except ProcessLookupError as exc:
        raise RuntimeFailure(f"gateway PID {pid} is not running") from exc
    except PermissionError as exc:
        raise RuntimeFailure(f"not allowed to signal gateway PID {pid}") from exc


@contextlib.asynccontextmanager
async def quiesced(
    data_dir: Path,
    *,
    max_defer_seconds: float = 120.0,
    engage_seconds: float = 5.0,
    poll_seconds: float = 0.1,
    abort: asyncio.Event | None = None,
) -> AsyncIterator[bool]:
    """Hold the gateway in Hermes' external drain while the block restarts it.

    1. Write the drain marker (``D/.drain_request.json``, the contract in
       ``gateway/drain_control.py``) unless someone else's drain is on: the gateway stops
       accepting NEW turns and lets in-flight turns finish, refreshing ``active_agents``.
    2. Wait until no agent work is in flight, at most ``max_defer_seconds`` (or until
       ``abort`` is set, e.g. by a SIGTERM); yields whether the gateway got idle. Hermes says
       so only in its status file, so that file is read every ``poll_seconds``.
    3. After the block (which signals the gateway and waits for its exit), remove our
       marker: a shutdown in progress is never reverted to running by that.

    On a Hermes whose drain contract the adapter does not know, nothing is written or
    waited for: the block runs at once and is told the gateway is not idle.
    """
    control = drain_control()
    if control is None:
        yield False
        return
    ours = control.begin(data_dir, DRAIN_PRINCIPAL)
    try:
        if ours:
            await _wait_for(lambda: _drain_engaged(data_dir), engage_seconds, poll_seconds, abort)
        idle = await _wait_for(
            lambda: active_agent_count(data_dir) == 0, max_defer_seconds, poll_seconds, abort
        )
        yield idle
    finally:
        if ours:
            clear_own_drain(data_dir)


async def _wait_for(
    condition: Callable[[], bool], seconds: float, poll: float, abort: asyncio.Event | None
) -> bool:
    deadline = time.monotonic() + seconds
    while not condition():
        left = deadline - time.monotonic()
        if left <= 0 or (abort is not None and abort.is_set()):
            return False
        await sleep_unless(abort, min(poll, left))
    return True


async def sleep_unless(event: asyncio.Event | None, seconds: float) -> None:
    """Sleep ``seconds``, or less if ``event`` is set meanwhile (a stop ends every wait)."""
    if event is None:
        await asyncio.sleep(seconds)
        return
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(event.wait(), seconds)


async def process_exited(pid: int, poll_seconds: float = 0.1) -> None:
    """Return once process ``pid`` has exited (a zombie counts: only its parent can reap it).

    The kernel says so through a pidfd (Linux >= 5.3), which the event loop watches: no
    thread, no polling. An older kernel has no pidfd: then ``/proc`` is read every
    ``poll_seconds``. Works for any process we may see, our child or not (``plugins watch``
    restarts a gateway that another supervisor started)."""
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return
    except (AttributeError, OSError):  # no pidfd_open on this kernel (or platform)
        while _process_alive(pid):
            await asyncio.sleep(poll_seconds)
        return
    loop = asyncio.get_running_loop()
    exited: asyncio.Future[None] = loop.create_future()

    def readable() -> None:
        if not exited.done():
            exited.set_result(None)

    loop.add_reader(fd, readable)
    try:
        await exited
    finally:
        loop.remove_reader(fd)
        os.close(fd)


async def signal_and_wait(pid: int, signum: int, timeout: float) -> bool:
    """Send ``signum`` to the gateway ``pid`` and wait up to ``timeout`` seconds for its exit;
    True when it exited in time. The one implementation for every gateway restart and stop:
    the entrypoint's ``Supervisor`` (its own child, killed if this says False) and
    ``GatewayRestarter`` (a gateway another supervisor started again)."""
    request_gateway_restart(pid, signum)
    try:
        await asyncio.wait_for(process_exited(pid), timeout)
    except TimeoutError:
        return False
    return True


@dataclass
class GatewayRestarter:
    """An ``on_change`` for ``plugins watch`` when no entrypoint supervises the gateway:
    ``quiesced``, SIGUSR1, wait for the exit (``signal_and_wait``); the gateway's own
    supervisor (systemd, a shell loop) starts it again on exit 75.

    ``pid`` is a function returning the gateway's PID; by default it is read from
    ``D/gateway.pid``. ``wait_seconds``: how long the exit may take, by default the
    entrypoint's stop budget from the same settings (``AgentSettings.stop_budget``: Hermes'
    drain timeout plus its shutdown). Inside the agent image the entrypoint's ``Supervisor``
    does the same through ``request_restart``.
    """

    data_dir: Path
    pid: Callable[[], int] | None = None
    max_defer_seconds: float = 120.0
    poll_seconds: float = 0.1
    wait_seconds: float | None = None
    restarts: list[float] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.wait_seconds is None:
            self.wait_seconds = AgentSettings.from_environ(os.environ).stop_budget
        clear_own_drain(self.data_dir)

    def __call__(self, report: LinkReport) -> None:
        asyncio.run(self._restart(report))

    async def _restart(self, report: LinkReport) -> None:
        pid = self.pid() if self.pid is not None else gateway_pid(self.data_dir)
        started = time.monotonic()
        wait = self.wait_seconds if self.wait_seconds is not None else 0.0
        async with quiesced(
            self.data_dir, max_defer_seconds=self.max_defer_seconds, poll_seconds=self.poll_seconds
        ) as idle:
            log_event(
                "agent.restart.gateway",
                pid=pid,
                idle=idle,
                quiesce_s=round(time.monotonic() - started, 3),
                commits=report.commits(),
            )
            self.restarts.append(time.time())
            if not await signal_and_wait(pid, signal.SIGUSR1, wait):
                log_event(
                    "agent.restart.slow",
                    level="warning",
                    pid=pid,
                    after_seconds=wait,
                    effect="the drain marker is removed while the gateway still runs",
                )


def begin_drain(data_dir: Path) -> bool:
    """Write our drain marker unless a drain is already requested; True if we wrote it.

    False too when the installed Hermes' drain contract is not one the adapter knows."""
    control = drain_control()
    return control is not None and control.begin(data_dir, DRAIN_PRINCIPAL)


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
