"""The gateway supervisor with real child processes: exit codes, restarts, graceful stop."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from hermes_runtime.agent import AgentMetrics, Supervisor
from hermes_runtime.agent.restart import DRAIN_MARKER, STATUS_FILE
from hermes_runtime.agent.supervisor import (
    CrashHistory,
    CrashPolicy,
    GatewayLaunch,
    SupervisorPolicy,
)

# A child that records each start, exits with a scripted status per start, and on SIGTERM or
# SIGUSR1 exits with the code a test asks for (or ignores it).
CHILD = r"""
import os, signal, sys, time
log, plan = sys.argv[1], sys.argv[2].split(",")
with open(log, "a") as fh:
    fh.write(f"{os.getpid()}\n")
starts = sum(1 for _ in open(log))
action = plan[min(starts, len(plan)) - 1]
def on_term(signum, frame):
    with open(log + ".signals", "a") as fh:
        fh.write(f"{signum}\n")
    if os.environ.get("IGNORE_TERM") != "1":
        sys.exit(int(os.environ.get("TERM_EXIT", "0")))
signal.signal(signal.SIGTERM, on_term)
signal.signal(signal.SIGINT, on_term)
signal.signal(signal.SIGUSR1, lambda s, f: sys.exit(75))
if action != "run":
    sys.exit(int(action))
while True:
    time.sleep(0.05)
"""


def make_supervisor(
    tmp_path: Path,
    plan: str,
    metrics: AgentMetrics | None = None,
    crash_policy: CrashPolicy | None = None,
    stop_signal: int | None = None,
    **env: str,
) -> tuple[Supervisor, Path]:
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    log = tmp_path / "starts.log"
    child_env = {**os.environ, **env}
    supervisor = Supervisor(
        GatewayLaunch(
            (sys.executable, str(script), str(log), plan),
            lambda: child_env,
            stop_signal=stop_signal,
        ),
        SupervisorPolicy(
            stop_timeout=2.0,
            poll_seconds=0.02,
            crash=crash_policy or CrashPolicy(first_backoff=0.01),
        ),
        metrics=metrics,
    )
    return supervisor, log


def starts(log: Path) -> int:
    return len(log.read_text().splitlines()) if log.exists() else 0


def wait_for(predicate, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.02)


def run_in_thread(supervisor: Supervisor) -> tuple[threading.Thread, list[int]]:
    result: list[int] = []
    thread = threading.Thread(
        target=lambda: result.append(asyncio.run(supervisor.run())), daemon=True
    )
    thread.start()
    return thread, result


def restarts(metrics: AgentMetrics, reason: str) -> float | None:
    return metrics.registry.get_sample_value(
        "hermes_runtime_gateway_restarts_total", {"reason": reason}
    )


def test_a_crash_is_restarted_in_place_and_counted_with_its_reason(tmp_path: Path) -> None:
    metrics = AgentMetrics()
    supervisor, log = make_supervisor(tmp_path, "3,run", metrics)
    thread, result = run_in_thread(supervisor)
    wait_for(lambda: starts(log) == 2)
    assert restarts(metrics, "crash-exit-3") == 1
    supervisor.request_stop(signal.SIGTERM)
    thread.join(10)
    assert result == [0]


def test_a_gateway_killed_with_sigkill_is_restarted_in_place(tmp_path: Path) -> None:
    metrics = AgentMetrics()
    supervisor, log = make_supervisor(tmp_path, "run", metrics)
    thread, result = run_in_thread(supervisor)
    wait_for(lambda: starts(log) == 1)
    first = int(log.read_text().split()[0])
    os.kill(first, signal.SIGKILL)
    wait_for(lambda: starts(log) == 2)
    assert int(log.read_text().split()[1]) != first
    assert restarts(metrics, "crash-SIGKILL") == 1
    assert metrics.registry.get_sample_value("hermes_runtime_gateway_up") == 1
    supervisor.request_stop(signal.SIGTERM)
    thread.join(10)
    assert result == [0]


def test_repeated_crashes_in_the_window_end_with_the_gateway_status(tmp_path: Path) -> None:
    metrics = AgentMetrics()
    policy = CrashPolicy(max_crashes=3, first_backoff=0.01)
    supervisor, log = make_supervisor(tmp_path, "3", metrics, policy)
    assert asyncio.run(supervisor.run()) == 3
    assert starts(log) == 3  # two restarts in place, then the kubelet's turn
    assert restarts(metrics, "crash-exit-3") == 2


def test_a_clean_exit_and_a_fatal_config_exit_are_not_restarted(tmp_path: Path) -> None:
    for plan, status in (("0", 0), ("78", 78)):
        (tmp_path / plan).mkdir()
        supervisor, log = make_supervisor(tmp_path / plan, plan)
        assert asyncio.run(supervisor.run()) == status
        assert starts(log) == 1


def test_the_back_off_doubles_for_quick_crashes_is_capped_and_resets_when_stable() -> None:
    history = CrashHistory(
        CrashPolicy(max_crashes=100, window_seconds=1000, first_backoff=0.5, max_backoff=3)
    )
    quick = [history.record(now=float(i), uptime=1.0) for i in range(5)]
    assert quick == [0.5, 1.0, 2.0, 3.0, 3.0]
    assert history.record(now=10.0, uptime=60.0) == 0.5  # it had run stably: start over
    window = CrashHistory(CrashPolicy(max_crashes=3, window_seconds=10))
    assert window.record(now=0.0, uptime=1) is not None
    assert window.record(now=20.0, uptime=1) is not None  # the first fell out of the window
    assert window.record(now=21.0, uptime=1) is not None  # two within 10 s
    assert window.record(now=22.0, uptime=1) is None  # the third within 10 s: give up


def test_exit_75_means_restart_me(tmp_path: Path) -> None:
    metrics = AgentMetrics()
    supervisor, log = make_supervisor(tmp_path, "75,75,0", metrics)
    assert asyncio.run(supervisor.run()) == 0
    assert starts(log) == 3
    restarts = metrics.registry.get_sample_value(
        "hermes_runtime_gateway_restarts_total", {"reason": "gateway-requested"}
    )
    assert restarts == 2
    assert metrics.registry.get_sample_value("hermes_runtime_gateway_starts_total") == 3


def test_request_restart_replaces_the_child_gracefully(tmp_path: Path) -> None:
    metrics = AgentMetrics()
    supervisor, log = make_supervisor(tmp_path, "run", metrics)
    thread, result = run_in_thread(supervisor)
    wait_for(lambda: starts(log) == 1)
    first_pid = supervisor.child.pid if supervisor.child else None
    supervisor.request_restart("secrets-changed")
    wait_for(lambda: starts(log) == 2)
    assert supervisor.child is not None and supervisor.child.pid != first_pid
    assert (
        metrics.registry.get_sample_value(
            "hermes_runtime_gateway_restarts_total", {"reason": "secrets-changed"}
        )
        == 1
    )
    supervisor.request_stop(signal.SIGTERM)
    thread.join(10)
    assert result == [0]


def test_stop_forwards_sigterm_and_returns_the_child_status(tmp_path: Path) -> None:
    supervisor, log = make_supervisor(tmp_path, "run", TERM_EXIT="0")
    thread, result = run_in_thread(supervisor)
    wait_for(lambda: starts(log) == 1)
    supervisor.request_stop(signal.SIGTERM)
    thread.join(10)
    assert result == [0]
    assert (tmp_path / "starts.log.signals").read_text().split() == [str(int(signal.SIGTERM))]
    assert starts(log) == 1


def test_a_launch_with_its_own_stop_signal_gets_it_once_for_any_stop(tmp_path: Path) -> None:
    """The agent's gateway gets SIGINT (Hermes' intentional stop) for the kubelet's SIGTERM;
    a second SIGTERM while it stops sends nothing more."""
    supervisor, log = make_supervisor(tmp_path, "run", stop_signal=signal.SIGINT, TERM_EXIT="0")
    thread, result = run_in_thread(supervisor)
    wait_for(lambda: starts(log) == 1)
    supervisor.request_stop(signal.SIGTERM)
    supervisor.request_stop(signal.SIGTERM)
    thread.join(10)
    assert result == [0]
    assert (tmp_path / "starts.log.signals").read_text().split() == [str(int(signal.SIGINT))]


def test_a_child_that_ignores_sigterm_is_killed_after_the_timeout(tmp_path: Path) -> None:
    supervisor, log = make_supervisor(tmp_path, "run", IGNORE_TERM="1")
    thread, result = run_in_thread(supervisor)
    wait_for(lambda: starts(log) == 1)
    began = time.monotonic()
    supervisor.request_stop(signal.SIGTERM)
    thread.join(15)
    assert result == [128 + signal.SIGKILL]
    assert time.monotonic() - began >= 2.0


def test_signals_to_the_supervisor_process_are_forwarded(tmp_path: Path) -> None:
    """The real path: SIGTERM to the supervisor's own process (as catatonit/kubelet sends)."""
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    runner = tmp_path / "runner.py"
    runner.write_text(
        "import asyncio, os, sys\n"
        "from hermes_runtime.agent.supervisor import GatewayLaunch, Supervisor, SupervisorPolicy\n"
        f"s = Supervisor(GatewayLaunch((sys.executable, {str(script)!r},"
        f" {str(tmp_path / 'starts.log')!r}, 'run'),"
        " lambda: {**os.environ, 'TERM_EXIT': '0'}), SupervisorPolicy(stop_timeout=5))\n"
        "async def main():\n"
        "    s.install_signal_handlers()\n"
        "    return await s.run()\n"
        "sys.exit(asyncio.run(main()))\n"
    )
    proc = subprocess.Popen([sys.executable, str(runner)])
    log = tmp_path / "starts.log"
    wait_for(lambda: starts(log) == 1)
    proc.send_signal(signal.SIGHUP)  # SIGHUP: restart the gateway
    wait_for(lambda: starts(log) == 2)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(15) == 0
    child_pids = [int(p) for p in log.read_text().split()]
    assert len(set(child_pids)) == 2
    for pid in child_pids:
        assert not Path(f"/proc/{pid}").exists(), f"gateway child {pid} outlived the supervisor"


def test_a_restart_request_waits_for_in_flight_turns_through_hermes_drain(tmp_path: Path) -> None:
    """The one restart path: drain marker, wait for idle, SIGUSR1, marker removed, new child."""
    data = tmp_path / "data"
    data.mkdir()
    state = data / STATUS_FILE
    state.write_text(json.dumps({"gateway_state": "draining", "active_agents": 1}))
    metrics = AgentMetrics()
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    log = tmp_path / "starts.log"
    supervisor = Supervisor(
        GatewayLaunch((sys.executable, str(script), str(log), "run"), lambda: dict(os.environ)),
        SupervisorPolicy(stop_timeout=2.0, poll_seconds=0.02, drain_dir=data),
        metrics=metrics,
    )
    thread, result = run_in_thread(supervisor)
    wait_for(lambda: starts(log) == 1)
    supervisor.request_restart("plugins-changed")
    marker = data / DRAIN_MARKER
    wait_for(marker.exists)
    time.sleep(0.5)
    assert starts(log) == 1, "restarted while a turn was in flight"
    state.write_text(json.dumps({"gateway_state": "draining", "active_agents": 0}))
    wait_for(lambda: starts(log) == 2)
    assert not marker.exists(), "the new gateway must not start drained"
    assert restarts(metrics, "plugins-changed") == 1
    # A SIGTERM during the wait for idle stops instead of restarting.
    state.write_text(json.dumps({"gateway_state": "draining", "active_agents": 1}))
    supervisor.request_restart("secrets-changed")
    wait_for(marker.exists)
    supervisor.request_stop(signal.SIGTERM)
    thread.join(10)
    assert result == [0]
    assert starts(log) == 2 and not marker.exists()
    assert restarts(metrics, "secrets-changed") is None
