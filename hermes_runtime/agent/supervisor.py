"""Run the Hermes gateway as a child process: forward signals, stop gracefully, restart on request.

Why a child process and not an in-process call: the gateway owns its event loop, its signal
handlers and its own restart protocol (exit code 75 = "restart me", as systemd's
``RestartForceExitStatus``); restarting it cleanly after a plugin or secret change needs a fresh
interpreter anyway. The supervisor stays small and single-threaded in its loop: signal handlers
and other threads only set flags that the loop polls, so no lock is ever taken in a handler.
Orphans of the gateway's tools are reaped by catatonit, PID 1 of the image and of every
container the chart renders; this process is never PID 1.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from hermes_runtime.agent.metrics import AgentMetrics
from hermes_runtime.agent.restart import GATEWAY_RESTART_EXIT_CODE, quiesced
from hermes_runtime.common.logs import log_event

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


GATEWAY_FATAL_CONFIG_EXIT_CODE = 78  # gateway/restart.py: a bad config, restarting cannot help


@dataclass(frozen=True)
class CrashPolicy:
    """How the supervisor answers a gateway that dies on its own: restart it in place.

    Why in place: when the container exits instead, the kubelet's back-off grows with every
    crash (5 s, 23 s, 31.5 s outages in our kill -9 runs). Here the first restart waits
    ``first_backoff``, each quick crash after it doubles that up to ``max_backoff``; a gateway
    that ran ``stable_seconds`` starts over at ``first_backoff``. Only ``max_crashes`` within
    ``window_seconds`` end the container, and then the kubelet's back-off is the last resort.
    """

    max_crashes: int = 5
    window_seconds: float = 60.0
    first_backoff: float = 0.2
    max_backoff: float = 5.0
    stable_seconds: float = 10.0


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
        return min(self.policy.max_backoff, self.policy.first_backoff * 2 ** max(0, self.step - 1))


def exit_status(returncode: int) -> int:
    """A shell-style exit status: a child killed by signal N becomes 128 + N."""
    return 128 - returncode if returncode < 0 else returncode


class Supervisor:
    """Keeps one gateway child running until a stop signal; see ``run``."""

    def __init__(
        self,
        command: Sequence[str],
        env_factory: Callable[[], Mapping[str, str]],
        *,
        stop_timeout: float = 25.0,
        metrics: AgentMetrics | None = None,
        cwd: Path | None = None,
        poll_interval: float = 0.1,
        restart_exit_codes: Sequence[int] = (GATEWAY_RESTART_EXIT_CODE,),
        restart_signal: int = signal.SIGUSR1,
        before_stop: Callable[[int], None] | None = None,
        drain_dir: Path | None = None,
        max_defer_seconds: float = 120.0,
        pass_fds: Sequence[int] = (),
        crash_policy: CrashPolicy | None = None,
        prestarted: Callable[[Mapping[str, str]], subprocess.Popen[bytes] | None] | None = None,
    ) -> None:
        self._command = list(command)
        self._env_factory = env_factory
        self._stop_timeout = stop_timeout
        self._metrics = metrics
        self._cwd = cwd
        self._poll_interval = poll_interval
        self._restart_exit_codes = set(restart_exit_codes)
        self._restart_signal = restart_signal
        self._before_stop = before_stop
        self._pass_fds = tuple(pass_fds)  # the data dir lock: the gateway holds it too
        self._crashes = CrashHistory(crash_policy or CrashPolicy())
        # The first gateway, already started and warm (zygote.py): given the env, it returns
        # the running child, or None when it cannot be used (then the usual start follows).
        self._prestarted = prestarted
        self._started_at = 0.0
        # Where Hermes' drain marker goes (the data dir); None: restart without quiescing.
        self._drain_dir = drain_dir
        self._max_defer_seconds = max_defer_seconds
        self._restart_lock = threading.Lock()
        self._restart_reasons: list[str] = []
        # True from a planned restart's quiesce (or a crash) until the next child is spawned.
        self._replacing = False
        self._spawns = 0
        self._stop_signal: int | None = None  # set from signal handlers: plain attribute only
        self._hangup = False
        self.child: subprocess.Popen[bytes] | None = None

    @property
    def running(self) -> bool:
        """Whether a gateway child is running (read from other threads: no ``waitpid``)."""
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

    # -- requests (any thread / signal handler) ------------------------------------------------
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

    def request_stop(self, signum: int = signal.SIGTERM) -> None:
        """Stop: forward ``signum`` to the gateway, wait for it, then return its exit status.

        ``before_stop(pid)`` runs first: the agent uses it to tell Hermes the stop is planned.
        """
        self._stop_signal = signum

    def install_signal_handlers(self) -> None:
        """SIGTERM/SIGINT stop the gateway gracefully; SIGHUP restarts it (main thread only)."""
        for signum in STOP_SIGNALS:
            signal.signal(signum, lambda s, _f: self.request_stop(s))
        signal.signal(signal.SIGHUP, lambda _s, _f: setattr(self, "_hangup", True))

    # -- the loop --------------------------------------------------------------------------------
    def run(self) -> int:
        """Run the gateway until a stop is requested or it keeps crashing; return its status.

        A child exit with a restart code (75), or a restart request, starts a new child at
        once; a crash (any other exit but 0 and 78) starts one after the ``CrashPolicy``'s
        back-off. Exit 0, a fatal-config exit (78) or too many crashes end the loop with the
        child's status, so Kubernetes sees them.
        """
        while True:
            if self._stop_signal is not None:
                return 128 + self._stop_signal
            child = self._spawn()
            outcome = self._wait(child)
            if outcome.kind == "stop":
                if self._before_stop is not None:
                    self._before_stop(child.pid)
                return self._terminate(child, outcome.signum)
            if outcome.kind == "restart":
                self._replacing = True
                stopped = self._restart(child, outcome.reason)
                if stopped is not None:
                    return stopped
                continue
            self._replacing = True  # a restart or a crash: the next child is on its way
            if outcome.code in self._restart_exit_codes and self._stop_signal is None:
                self._count_restart("gateway-requested")  # e.g. /restart in a chat
                continue
            if not self._restart_after_crash(child):
                return outcome.code

    def _restart(self, child: subprocess.Popen[bytes], reason: str) -> int | None:
        """Quiesce, then SIGUSR1; None when restarted, or the status if a stop came first."""
        drain = (
            quiesced(
                self._drain_dir,
                max_defer_seconds=self._max_defer_seconds,
                poll_seconds=self._poll_interval,
                abort=lambda: self._stop_signal is not None,
            )
            if self._drain_dir is not None
            else contextlib.nullcontext(True)
        )
        with drain:
            if self._stop_signal is not None:  # SIGTERM while quiescing: stop, not restart
                if self._before_stop is not None:
                    self._before_stop(child.pid)
                return self._terminate(child, self._stop_signal)
            self._terminate(child, self._restart_signal)
        self._count_restart(reason)
        return None

    def _restart_after_crash(self, child: subprocess.Popen[bytes]) -> bool:
        """Wait the back-off and return True to restart, or False to end with its status."""
        returncode = child.returncode
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
        deadline = time.monotonic() + backoff
        while self._stop_signal is None and time.monotonic() < deadline:
            time.sleep(min(self._poll_interval, backoff))
        return True

    def end_leftovers(self) -> None:
        """SIGKILL what is left of the last gateway's process group (tool processes), so
        nothing it started writes to the data volume once the lock is released."""
        child = self.child
        if child is not None and child.returncode is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(child.pid, signal.SIGKILL)

    def _spawn(self) -> subprocess.Popen[bytes]:
        env = dict(self._env_factory())
        take, self._prestarted = self._prestarted, None
        child = take(env) if take is not None else None
        if child is None:
            # A new session: a terminal's Ctrl+C reaches only the supervisor, which forwards it.
            child = subprocess.Popen(
                self._command,
                env=env,
                cwd=self._cwd,
                start_new_session=True,
                pass_fds=self._pass_fds,
            )
        self.child = child
        self._started_at = time.monotonic()
        self._spawns += 1
        self._replacing = False
        log_event("agent.gateway.start", pid=child.pid, command=self._command[:6])
        if self._metrics is not None:
            self._metrics.gateway_starts.inc()
            self._metrics.gateway_up.set(1)
        return child

    def _wait(self, child: subprocess.Popen[bytes]) -> _Outcome:
        while True:
            returncode = child.poll()
            if returncode is not None:
                self._mark_down()
                return _Outcome("exited", code=exit_status(returncode))
            if self._stop_signal is not None:
                return _Outcome("stop", signum=self._stop_signal)
            reason = self._pop_restart_reason()
            if reason is not None:
                return _Outcome("restart", reason=reason)
            time.sleep(self._poll_interval)

    def _pop_restart_reason(self) -> str | None:
        if self._hangup:
            self._hangup = False
            return "sighup"
        with self._restart_lock:
            if not self._restart_reasons:
                return None
            reasons = ", ".join(dict.fromkeys(self._restart_reasons))
            self._restart_reasons.clear()
            return reasons

    def _terminate(self, child: subprocess.Popen[bytes], signum: int) -> int:
        """Forward ``signum``; after ``stop_timeout`` kill the child's whole process group."""
        log_event("agent.gateway.stop", pid=child.pid, signal=signal.Signals(signum).name)
        with contextlib.suppress(ProcessLookupError):
            child.send_signal(signum)
        deadline = time.monotonic() + self._stop_timeout
        forwarded = signum
        while child.poll() is None and time.monotonic() < deadline:
            # A second stop signal while waiting is forwarded too (e.g. an impatient Ctrl+C).
            if self._stop_signal is not None and self._stop_signal != forwarded:
                forwarded = self._stop_signal
                with contextlib.suppress(ProcessLookupError):
                    child.send_signal(forwarded)
            time.sleep(self._poll_interval)
        if child.poll() is None:
            log_event("agent.gateway.kill", pid=child.pid, after_seconds=self._stop_timeout)
            with contextlib.suppress(ProcessLookupError):
                os.killpg(child.pid, signal.SIGKILL)
            child.wait()
        self._mark_down()
        status = exit_status(child.returncode)
        log_event("agent.gateway.stopped", pid=child.pid, status=status)
        return status

    def _mark_down(self) -> None:
        if self._metrics is not None:
            self._metrics.gateway_up.set(0)

    def _count_restart(self, reason: str) -> None:
        log_event("agent.gateway.restart", reason=reason)
        if self._metrics is not None:
            self._metrics.gateway_restarts.labels(reason=reason).inc()
