"""The restart path's safety rules: whose drain marker, which PID."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from hermes_runtime.agent.restart import (
    DRAIN_MARKER,
    DRAIN_PRINCIPAL,
    GatewayRestarter,
    _process_alive,
    active_agent_count,
    begin_drain,
    clear_own_drain,
    gateway_pid,
    process_exited,
    request_gateway_restart,
    signal_and_wait,
)
from hermes_runtime.common.errors import RuntimeFailure
from hermes_runtime.plugins import LinkReport


def test_begin_drain_writes_hermes_contract_and_clear_removes_it(tmp_path: Path) -> None:
    assert begin_drain(tmp_path)
    payload = json.loads((tmp_path / DRAIN_MARKER).read_text())
    assert payload["action"] == "drain" and payload["principal"] == DRAIN_PRINCIPAL
    assert payload["suppress_notification"] is True
    assert not begin_drain(tmp_path), "a second drain must not overwrite the first"
    clear_own_drain(tmp_path)
    assert not (tmp_path / DRAIN_MARKER).exists()


def test_someone_elses_drain_is_left_alone(tmp_path: Path) -> None:
    marker = tmp_path / DRAIN_MARKER
    marker.write_text(json.dumps({"action": "drain", "principal": "operator"}))
    assert not begin_drain(tmp_path)
    clear_own_drain(tmp_path)
    assert json.loads(marker.read_text())["principal"] == "operator"
    marker.write_text("{half-written")
    clear_own_drain(tmp_path)
    assert marker.exists()


def test_active_agent_count(tmp_path: Path) -> None:
    assert active_agent_count(tmp_path) is None
    (tmp_path / "gateway_state.json").write_text('{"active_agents": 2}')
    assert active_agent_count(tmp_path) == 2
    (tmp_path / "gateway_state.json").write_text("garbage")
    assert active_agent_count(tmp_path) is None


def test_gateway_pid_rules(tmp_path: Path) -> None:
    with pytest.raises(RuntimeFailure, match=r"gateway\.pid"):
        gateway_pid(tmp_path)
    (tmp_path / "gateway.pid").write_text(json.dumps({"pid": os.getpid()}))
    with pytest.raises(RuntimeFailure, match="not a Hermes gateway"):
        gateway_pid(tmp_path)


def test_signalling_a_dead_pid_is_an_error() -> None:
    child = subprocess.Popen(["true"])
    child.wait()
    assert not _process_alive(child.pid)
    assert _process_alive(os.getpid())
    beyond_pid_max = int(Path("/proc/sys/kernel/pid_max").read_text()) + 1
    with pytest.raises(RuntimeFailure, match="not running"):
        request_gateway_restart(beyond_pid_max)


# A stand-in gateway that drains for DRAIN seconds on SIGUSR1, then exits 75.
SLOW_DRAIN = (
    "import signal, sys, time\n"
    "signal.signal(signal.SIGUSR1, lambda s, f: (time.sleep(float(sys.argv[1])), sys.exit(75)))\n"
    "print('ready', flush=True)\n"
    "while True:\n"
    "    time.sleep(0.05)\n"
)


def slow_gateway(drain_seconds: float) -> subprocess.Popen[str]:
    proc = subprocess.Popen(
        [sys.executable, "-c", SLOW_DRAIN, str(drain_seconds)], stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None and proc.stdout.readline() == "ready\n"
    return proc


@pytest.mark.parametrize("pidfd", [True, False], ids=["pidfd", "proc-polling"])
def test_process_exited_returns_when_a_child_or_another_process_exits(
    pidfd: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Both ways of noticing an exit: the pidfd the loop watches, and /proc on kernels
    without one (forced here by taking pidfd_open away)."""
    if not pidfd:
        monkeypatch.delattr(os, "pidfd_open")
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(0.5)"])

    async def watch() -> float:
        started = time.monotonic()
        await asyncio.wait_for(process_exited(child.pid, poll_seconds=0.02), 30)
        return time.monotonic() - started

    assert asyncio.run(watch()) >= 0.3  # it waited for the exit (a zombie: not reaped yet)
    assert child.poll() == 0
    asyncio.run(asyncio.wait_for(process_exited(child.pid), 5))  # gone: returns at once


def test_signal_and_wait_says_whether_the_gateway_exited_in_time() -> None:
    slow = slow_gateway(3.0)
    try:
        assert asyncio.run(signal_and_wait(slow.pid, signal.SIGUSR1, 0.3)) is False
        assert slow.poll() is None  # still draining: the caller decides (kill, or log)
        assert asyncio.run(signal_and_wait(slow.pid, signal.SIGUSR1, 30)) is True
        assert slow.wait(5) == 75
    finally:
        slow.kill()
        slow.wait()


def test_the_restarter_waits_as_long_as_the_settings_let_the_gateway_drain(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    """No fixed 60 s: the wait for the exit is the stop budget of the same settings the
    entrypoint reads (grace period - preStop - hand-over - 2 s)."""
    monkeypatch.setenv("HERMES_RUNTIME_TERMINATION_GRACE_SECONDS", "5")
    monkeypatch.setenv("HERMES_RUNTIME_PRESTOP_SECONDS", "2")
    monkeypatch.delenv("HERMES_RUNTIME_HANDOVER_SECONDS", raising=False)
    # Hermes' status file: drain engaged and idle, so the quiesce is over at once.
    (tmp_path / "gateway_state.json").write_text(
        json.dumps({"gateway_state": "draining", "active_agents": 0})
    )
    report = LinkReport(tmp_path, tmp_path / "plugins.yaml")
    slow = slow_gateway(4.0)  # drains longer than the 1 s budget
    try:
        restarter = GatewayRestarter(tmp_path, pid=lambda: slow.pid, max_defer_seconds=0)
        assert restarter.wait_seconds == 1.0  # 5 - 2 - 2
        started = time.monotonic()
        restarter(report)
        waited = time.monotonic() - started
        assert 1.0 <= waited < 3.5 and slow.poll() is None
        assert '"agent.restart.slow"' in capfd.readouterr().err
        quick = slow_gateway(0.2)
        restarter = GatewayRestarter(tmp_path, pid=lambda: quick.pid, wait_seconds=30)
        restarter(report)
        assert quick.poll() == 75  # waited for the exit, not the 30 s
    finally:
        slow.kill()
        slow.wait()
