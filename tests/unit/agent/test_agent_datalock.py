"""At most one gateway per data volume, with real entrypoint processes on one data dir."""

from __future__ import annotations

import itertools
import json
import os
import signal
from pathlib import Path

from fake_gateway import history, start_entrypoint, started, wait_for


def intervals(data: Path) -> dict[int, tuple[float, float]]:
    """Each stand-in gateway's (start, end) from the shared history file."""
    spans: dict[int, list[float]] = {}
    for event in history(data):
        if event.what in ("start", "end"):
            spans.setdefault(event.pid, []).append(event.at)
    return {pid: (times[0], times[-1]) for pid, times in spans.items() if len(times) == 2}


def assert_never_overlapping(data: Path) -> None:
    spans = sorted(intervals(data).values())
    for (_, end), (next_start, _) in itertools.pairwise(spans):
        assert next_start >= end, f"two gateways ran at once on {data}: {spans}"


def test_a_second_entrypoint_waits_and_starts_once_the_first_has_exited(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    first = start_entrypoint(data, tmp_path, "first", FAKE_DRAIN_SECONDS="1.0")
    second = None
    try:
        wait_for(lambda: started(data, "first"), what="the first gateway")
        second = start_entrypoint(data, tmp_path, "second")
        wait_for(lambda: "agent.lock.waiting" in second.output(), what="the second one waiting")
        assert f"PID {first.proc.pid}" in second.output()  # the log names who holds the lock
        assert not started(data, "second")
        assert first.stop() == 0  # drains for 1 s; the second must not start meanwhile
        wait_for(lambda: started(data, "second"), what="the second gateway after the first")
        assert_never_overlapping(data)
        assert len(intervals(data)) == 1  # the first ran and ended; the second still runs
    finally:
        first.proc.kill()
        if second is not None:
            assert second.stop() == 0, second.output()[-2000:]
    assert_never_overlapping(data)
    assert len(intervals(data)) == 2
    holder = json.loads((data / ".hermes-runtime" / "gateway.lock").read_text())
    assert holder["pid"] == second.proc.pid


def test_the_lock_outlives_a_killed_supervisor_while_its_gateway_runs(tmp_path: Path) -> None:
    """The gateway inherits the lock: SIGKILL of the entrypoint alone lets no one in."""
    data = tmp_path / "data"
    data.mkdir()
    first = start_entrypoint(data, tmp_path, "first")
    wait_for(lambda: started(data, "first"), what="the first gateway")
    gateway = next(e.pid for e in history(data) if e.name == "first")
    first.proc.kill()
    first.proc.wait(10)
    second = start_entrypoint(data, tmp_path, "second")
    try:
        wait_for(lambda: "agent.lock.waiting" in second.output(), what="the second one waiting")
        assert not started(data, "second")
        os.kill(gateway, signal.SIGTERM)  # the orphaned gateway ends: the lock is free
        wait_for(lambda: started(data, "second"), what="the second gateway")
    finally:
        with_status = second.stop()
    assert with_status == 0, second.output()[-2000:]
    assert_never_overlapping(data)


def test_waiting_too_long_fails_with_a_message_naming_the_lock_and_holder(
    tmp_path: Path,
) -> None:
    data = tmp_path / "data"
    data.mkdir()
    first = start_entrypoint(data, tmp_path, "first")
    try:
        wait_for(lambda: started(data, "first"), what="the first gateway")
        second = start_entrypoint(data, tmp_path, "second", HERMES_RUNTIME_LOCK_TIMEOUT="1")
        assert second.proc.wait(30) == 1
    finally:
        assert first.stop() == 0
    output = second.output()
    lock = data / ".hermes-runtime" / "gateway.lock"
    assert f"error: timed out after 1 s waiting for the data dir lock {lock}" in output
    assert f"PID {first.proc.pid}" in output
    assert "Traceback" not in output
    assert not started(data, "second")
