"""Run the Hermes gateway as a child process: forward signals, stop gracefully, restart on request.

Why a child process and not an in-process call: the gateway owns its event loop, its signal
handlers and its own restart protocol (exit code 75 = "restart me", as systemd's
``RestartForceExitStatus``); restarting it cleanly after a plugin or secret change needs a fresh
interpreter anyway. The supervisor is a coroutine on the entrypoint's one event loop: it sleeps
until something happens (the child exits, seen through a pidfd; a stop or restart request,
set as an ``asyncio.Event``), never on a timer. Requests may come from signal handlers (on the
loop) or other threads (the plugin watcher): they set a flag and wake the loop
thread-safely. Orphans of the gateway's tools are reaped by catatonit, PID 1 of the image and
of every container the chart renders; this process is never PID 1.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from hermes_runtime.agent.metrics import AgentMetrics
from hermes_runtime.agent.restart import (
    GATEWAY_RESTART_EXIT_CODE,
    process_exited,
    quiesced,
    signal_and_wait,
    sleep_unless,
)
from hermes_runtime.common.backoff import Backoff
from hermes_runtime.common.logs import log_event

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)
GATEWAY_FATAL_CONFIG_EXIT_CODE = 78  # gateway/restart.py: a bad config, restarting cannot help

# The first gateway, already started and warm (zygote.py): given the env, it returns the
# running child, or None when it cannot be used (then the usual start follows).
FirstGateway = Callable[[Mapping[str, str]], "subprocess.Popen[bytes] | None"]


@dataclass(frozen=True)
class CrashPolicy:
    """How the supervisor answers a gateway that dies on its own: restart it in place.

    Why in place: when the container exits instead, the kubelet's back-off grows with every
    crash, and the container is down for each of its waits. Here the first restart waits
    ``first_backoff``, each quick crash after it doubles that up to ``max_backoff``; a gateway
    that ran ``stable_seconds`` starts over at ``first_backoff``. Only ``max_crashes`` within
    ``window_seconds`` end the container, and then the kubelet's back-off is the last resort.
    No jitter: one supervisor restarts its own child, there is no crowd to spread.
    """

    max_crashes: int = 5
    window_seconds: float = 60.0
    first_backoff: float = 0.2
    max_backoff: float = 5.0
    stable_seconds: float = 10.0

    @property
    def backoff(self) -> Backoff:
        return Backoff(first=self.first_backoff, cap=self.max_backoff)


@dataclass(frozen=True)
class GatewayLaunch:
    """How a gateway child is started, and which signal stops it."""

    command: tuple[str, ...]
    env: Callable[[], Mapping[str, str]]
    cwd: Path | None = None
    pass_fds: tuple[int, ...] = ()  # the data dir lock: the gateway holds it too
    # The signal a stop forwards to the child (None: the one received). Hermes' gateway gets
    # SIGINT, which it always counts as an intentional stop (exit 0). A SIGTERM counts only
    # with Hermes' planned-stop marker, whose polling thread can fire beside the signal and
    # turn the same stop into an "unexpected" exit 1.
    stop_signal: int | None = None


@dataclass(frozen=True)
class SupervisorPolicy:
    """How long a stop may take, how planned restarts quiesce, how crashes are retried.

    ``stop_timeout``: from the signal (SIGTERM, or SIGUSR1 for a restart) until the child's
    process group is killed. ``drain_dir``: where Hermes' drain marker goes (the data dir);
    None: restart without quiescing. ``poll_seconds``: how often Hermes' status file is read
    while quiescing (Hermes tells nothing else)."""

    stop_timeout: float = 25.0
    drain_dir: Path | None = None
    max_defer_seconds: float = 120.0
    poll_seconds: float = 0.1
    crash: CrashPolicy = field(default_factory=CrashPolicy)
    restart_exit_codes: frozenset[int] = frozenset({GATEWAY_RESTART_EXIT_CODE})
    restart_signal: int = signal.SIGUSR1


@dataclass(frozen=True)
class _Outcome:
    kind: str  # exited | restart | stop
    code: int = 0  # the shell-style status: 128 + N for signal N
    reason: str = ""
    signum: int = signal.SIGTERM


def crash_reason(returncode: int) -> str:
    """The ``reason`` label of a crash restart: ``crash-SIGKILL``, ``crash-exit-1``."""
    if returncode < 0:
        try:
            return f"crash-{signal.Signals(-returncode).name}"
        except ValueError:
            return f"crash-signal-{-returncode}"
    return f"crash-exit-{returncode}"


@dataclass
class CrashHistory:
    """Recent crash times and the current back-off step; owned by the supervisor loop."""

    policy: CrashPolicy
    times: list[float] = field(default_factory=list)
    step: int = 0

    def record(self, now: float, uptime: float) -> float | None:
        """Note a crash; return the back-off before the restart, or None: give up."""
        self.times = [t for t in self.times if now - t < self.policy.window_seconds] + [now]
        if len(self.times) >= self.policy.max_crashes:
            return None
        self.step = 0 if uptime >= self.policy.stable_seconds else self.step + 1
        return self.policy.backoff.delay(max(0, self.step - 1))


def exit_status(returncode: int) -> int:
    """A shell-style exit status: a child killed by signal N becomes 128 + N."""
    return 128 - returncode if returncode < 0 else returncode


async def child_exited(child: subprocess.Popen[bytes]) -> int:
    """Wait for ``child`` to exit, reap it, return its ``returncode``. Only the supervisor
    reaps its children (everyone else reads ``returncode``), so the PID watched is never a
    reused one."""
    if child.poll() is None:
        await process_exited(child.pid)
    return child.wait()


class Supervisor:
    """Keeps one gateway child running until a stop signal; see ``run``."""

    def __init__(
        self,
        launch: GatewayLaunch,
        policy: SupervisorPolicy | None = None,
        *,
        metrics: AgentMetrics | None = None,
    ) -> None:
        self._launch = launch
        self._policy = policy or SupervisorPolicy()
        self._metrics = metrics
        self._crashes = CrashHistory(self._policy.crash)
        self._started_at = 0.0
        self._restart_lock = threading.Lock()  # request_restart comes from other threads
        self._restart_reasons: list[str] = []
        # True from a planned restart's quiesce (or a crash) until the next child is spawned.
        self._replacing = False
        self._spawns = 0
        self._stop_signal: int | None = None
        self._forwarded: int | None = None  # the stop signal the stopping child got
        self._loop: asyncio.AbstractEventLoop | None = None
        self._wake = asyncio.Event()  # a request arrived: look at the flags
        self._stopping = asyncio.Event()  # a stop arrived: every wait ends
        self.child: subprocess.Popen[bytes] | None = None

    @property
    def running(self) -> bool:
        """Whether a gateway child is running (read anywhere: no ``waitpid``)."""
        child = self.child
        return child is not None and child.returncode is None

    @property
    def stop_requested(self) -> bool:
        return self._stop_signal is not None

    @property
    def replacing(self) -> bool:
        """Whether the gateway is being replaced: the old one quiesced or stopped for a planned
        restart, or a crashed one waiting for its back-off. The front door holds new
        connections meanwhile (the old gateway may still listen, but refuses new turns)."""
        return self._replacing and self._stop_signal is None

    def restarting(self, grace_seconds: float) -> bool:
        """Whether a replacement gateway is on its way: ``replacing``, or a gateway started by a
        restart less than ``grace_seconds`` ago (it needs seconds to import and bind). Not the
        first start: a pod is not ready before its first gateway answers."""
        if self._stop_signal is not None:
            return False
        if self._replacing:
            return True
        return self._spawns > 1 and time.monotonic() - self._started_at < grace_seconds

    # -- requests (any thread, or a signal handler on the loop) --------------------------------
    def request_restart(self, reason: str) -> None:
        """Ask for a graceful restart of the gateway child (plugins changed, secrets rotated).

        The one restart path (``agent/restart.py``): with a ``drain_dir``, the gateway is
        ``quiesced`` first (no new turns, in-flight ones finish, at most
        ``max_defer_seconds``); then it gets ``restart_signal`` (SIGUSR1: Hermes drains and
        exits 75), is killed after ``stop_timeout`` if it has not exited, and a new child
        starts. Requests that arrive meanwhile are merged into one restart.
        """
        with self._restart_lock:
            self._restart_reasons.append(reason)
        self._call(self._wake.set)

    def request_stop(self, signum: int = signal.SIGTERM) -> None:
        """Stop: forward ``signum`` to the gateway, wait for it, then ``run`` returns its exit
        status. The child gets ``launch.stop_signal`` if set. A second,
        different stop signal while the gateway stops is forwarded too (an impatient Ctrl+C).
        """
        self._stop_signal = signum
        self._call(self._on_stop)

    def install_signal_handlers(self, on_stop: Callable[[int], None] | None = None) -> None:
        """SIGTERM/SIGINT stop (``on_stop(signum)``, by default ``request_stop``); SIGHUP
        restarts the gateway. On the running loop: call from a coroutine on the main thread."""
        loop = asyncio.get_running_loop()
        for signum in STOP_SIGNALS:
            loop.add_signal_handler(signum, on_stop or self.request_stop, signum)
        loop.add_signal_handler(signal.SIGHUP, self.request_restart, "sighup")

    def _call(self, callback: Callable[[], object]) -> None:
        """Run ``callback`` on the loop (thread-safe); before ``run`` the flags are enough."""
        loop = self._loop
        if loop is not None:
            with contextlib.suppress(RuntimeError):  # the loop is gone: nothing waits
                loop.call_soon_threadsafe(callback)

    def _on_stop(self) -> None:
        self._stopping.set()
        self._wake.set()
        child, received, forwarded = self.child, self._stop_signal, self._forwarded
        signum = None if received is None else self._child_signal(received)
        stopping = forwarded is not None and child is not None and child.returncode is None
        if stopping and child is not None and signum is not None and signum != forwarded:
            self._forwarded = signum
            with contextlib.suppress(ProcessLookupError):
                child.send_signal(signum)

    # -- the loop --------------------------------------------------------------------------------
    async def run(self, first: FirstGateway | None = None) -> int:
        """Run the gateway until a stop is requested or it keeps crashing; return its status.

        ``first``: the warm gateway (``zygote.py``), taken as the first child if it can be.
        A child exit with a restart code (75), or a restart request, starts a new child at
        once; a crash (any other exit but 0 and 78) starts one after the ``CrashPolicy``'s
        back-off. Exit 0, a fatal-config exit (78) or too many crashes end the loop with the
        child's status, so Kubernetes sees them.
        """
        self._loop = asyncio.get_running_loop()
        if self._stop_signal is not None:
            self._on_stop()
        while True:
            if self._stop_signal is not None:
                return 128 + self._stop_signal
            child = self._spawn(first)
            first = None
            outcome = await self._wait(child)
            if outcome.kind == "stop":
                return await self._stop(child, outcome.signum)
            self._replacing = True  # a restart or a crash: the next child is on its way
            if outcome.kind == "restart":
                stopped = await self._restart(child, outcome.reason)
                if stopped is not None:
                    return stopped
                continue
            if outcome.code in self._policy.restart_exit_codes and self._stop_signal is None:
                self._count_restart("gateway-requested")  # e.g. /restart in a chat
                continue
            if not await self._restart_after_crash(child):
                return outcome.code

    async def _wait(self, child: subprocess.Popen[bytes]) -> _Outcome:
        """Sleep until the child exits or a request arrives."""
        exited = asyncio.ensure_future(child_exited(child))
        try:
            while True:
                self._wake.clear()
                if exited.done():
                    self._mark_down()
                    return _Outcome("exited", code=exit_status(exited.result()))
                if self._stop_signal is not None:
                    return _Outcome("stop", signum=self._stop_signal)
                reason = self._pop_restart_reason()
                if reason is not None:
                    return _Outcome("restart", reason=reason)
                woken = asyncio.ensure_future(self._wake.wait())
                await asyncio.wait({exited, woken}, return_when=asyncio.FIRST_COMPLETED)
                woken.cancel()
        finally:
            exited.cancel()

    def _child_signal(self, received: int) -> int:
        """The stop signal the child gets for ``received`` (``GatewayLaunch.stop_signal``)."""
        return self._launch.stop_signal or received

    async def _stop(self, child: subprocess.Popen[bytes], signum: int) -> int:
        return await self._terminate(child, self._child_signal(signum))

    async def _restart(self, child: subprocess.Popen[bytes], reason: str) -> int | None:
        """Quiesce, then SIGUSR1; None when restarted, or the status if a stop came first."""
        drain_dir = self._policy.drain_dir
        drain = (
            quiesced(
                drain_dir,
                max_defer_seconds=self._policy.max_defer_seconds,
                poll_seconds=self._policy.poll_seconds,
                abort=self._stopping,
            )
            if drain_dir is not None
            else contextlib.nullcontext(True)
        )
        async with drain:
            if self._stop_signal is not None:  # SIGTERM while quiescing: stop, not restart
                return await self._stop(child, self._stop_signal)
            await self._terminate(child, self._policy.restart_signal)
        self._count_restart(reason)
        return None

    async def _restart_after_crash(self, child: subprocess.Popen[bytes]) -> bool:
        """Wait the back-off and return True to restart, or False to end with its status."""
        returncode = child.returncode
        assert returncode is not None  # reaped by _wait
        status = exit_status(returncode)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(child.pid, signal.SIGKILL)  # tool processes the dead gateway left behind
        if self._stop_signal is not None or status in (0, GATEWAY_FATAL_CONFIG_EXIT_CODE):
            log_event("agent.gateway.exited", status=status)
            return False
        now = time.monotonic()
        backoff = self._crashes.record(now, uptime=now - self._started_at)
        reason = crash_reason(returncode)
        if backoff is None:
            log_event(
                "agent.gateway.gave_up",
                status=status,
                reason=reason,
                crashes=len(self._crashes.times),
                window_seconds=self._crashes.policy.window_seconds,
            )
            return False
        log_event("agent.gateway.crashed", status=status, reason=reason, restart_in=backoff)
        self._count_restart(reason)
        await sleep_unless(self._stopping, backoff)
        return True

    def end_leftovers(self) -> None:
        """SIGKILL what is left of the last gateway's process group (tool processes), so
        nothing it started writes to the data volume once the lock is released."""
        child = self.child
        if child is not None and child.returncode is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(child.pid, signal.SIGKILL)

    def _spawn(self, first: FirstGateway | None) -> subprocess.Popen[bytes]:
        launch = self._launch
        env = dict(launch.env())
        child = first(env) if first is not None else None
        if child is None:
            # A new session: a terminal's Ctrl+C reaches only the supervisor, which forwards it.
            child = subprocess.Popen(
                launch.command,
                env=env,
                cwd=launch.cwd,
                start_new_session=True,
                pass_fds=launch.pass_fds,
            )
        self.child = child
        self._started_at = time.monotonic()
        self._spawns += 1
        self._replacing = False
        log_event("agent.gateway.start", pid=child.pid, command=list(launch.command[:6]))
        if self._metrics is not None:
            self._metrics.gateway_starts.inc()
            self._metrics.gateway_up.set(1)
        return child

    def _pop_restart_reason(self) -> str | None:
        with self._restart_lock:
            if not self._restart_reasons:
                return None
            reasons = ", ".join(dict.fromkeys(self._restart_reasons))
            self._restart_reasons.clear()
            return reasons

    async def _terminate(self, child: subprocess.Popen[bytes], signum: int) -> int:
        """Forward ``signum``; after ``stop_timeout`` kill the child's whole process group."""
        log_event("agent.gateway.stop", pid=child.pid, signal=signal.Signals(signum).name)
        timeout = self._policy.stop_timeout
        self._forwarded = signum
        try:
            exited = child.returncode is not None or await signal_and_wait(
                child.pid, signum, timeout
            )
        finally:
            self._forwarded = None
        if not exited:
            log_event("agent.gateway.kill", pid=child.pid, after_seconds=timeout)
            with contextlib.suppress(ProcessLookupError):
                os.killpg(child.pid, signal.SIGKILL)
        status = exit_status(await child_exited(child))
        self._mark_down()
        log_event("agent.gateway.stopped", pid=child.pid, status=status)
        return status

    def _mark_down(self) -> None:
        if self._metrics is not None:
            self._metrics.gateway_up.set(0)

    def _count_restart(self, reason: str) -> None:
        log_event("agent.gateway.restart", reason=reason)
        if self._metrics is not None:
            self._metrics.gateway_restarts.labels(reason=reason).inc()
