"""The warm hand-over: the successor imports while it waits for the lock, the old pod waits for it.

Real entrypoint processes on one data dir with the stand-in gateway (fake_gateway.py), whose
``fake_heavy`` import stands for Hermes' libraries; the kubelet's preStop hook is what it
runs: ``hermes-runtime agent pre-stop`` with the container's env.
"""

from __future__ import annotations

import json
import signal
import threading
import time
from pathlib import Path
from typing import Any

from fake_gateway import Entrypoint, history, imports, start_entrypoint, started, wait_for

from hermes_runtime.agent.successor import waiting_successor

STATE = ".hermes-runtime"


def ended_at(data: Path, name: str) -> float:
    (at,) = [e.at for e in history(data) if e.what == "end" and e.name == name]
    return at


def start_old_pod(data: Path, tmp_path: Path, **env: str) -> Entrypoint:
    """The pod being replaced: its preStop hook waits up to 60 s for a successor."""
    return start_entrypoint(
        data,
        tmp_path,
        "first",
        HERMES_RUNTIME_HANDOVER_SECONDS="60",
        HERMES_RUNTIME_TERMINATION_GRACE_SECONDS="120",
        **env,
    )


def pre_stop_in_background(
    agent: Entrypoint,
) -> tuple[threading.Thread, list[tuple[int, dict[str, Any]]]]:
    answers: list[tuple[int, dict[str, Any]]] = []
    caller = threading.Thread(target=lambda: answers.append(agent.pre_stop(timeout=90)))
    caller.start()
    return caller, answers


def test_the_successor_imports_before_the_lock_and_runs_in_the_same_process(
    tmp_path: Path,
) -> None:
    data = tmp_path / "data"
    data.mkdir()
    log = tmp_path / "imports.log"
    first = start_entrypoint(data, tmp_path, "first", FAKE_DRAIN_SECONDS="1.0")
    second = None
    try:
        wait_for(lambda: started(data, "first"), what="the first gateway")
        assert waiting_successor(data / STATE) is None
        second = start_entrypoint(
            data, tmp_path, "second", FAKE_IMPORT_SECONDS="1.5", FAKE_IMPORT_LOG=str(log)
        )
        wait_for(lambda: waiting_successor(data / STATE), what="the second one announced")
        # The record is written before the log line: under load the test can read in between.
        wait_for(lambda: "agent.lock.successor" in second.output(), what="its log line")
        [(imported_at, warm_pid)] = imports(log)  # imported once, while waiting
        assert not started(data, "second")
        assert first.stop() == 0
        wait_for(lambda: started(data, "second"), what="the second gateway")
        assert imported_at < ended_at(data, "first")  # the import was off the critical path
        assert started(data, "second") == [warm_pid]  # the warm process runs the gateway
        assert imports(log) == [(imported_at, warm_pid)]  # and did not import again
        assert waiting_successor(data / STATE) is None  # the announcement ends with the lock
    finally:
        first.proc.kill()
        if second is not None:
            assert second.stop() == 0, second.output()[-2000:]


def test_pre_stop_serves_until_a_warm_successor_waits_then_turns_unready(
    tmp_path: Path,
) -> None:
    data = tmp_path / "data"
    data.mkdir()
    first = start_old_pod(data, tmp_path)
    second = None
    try:
        wait_for(lambda: first.get("/ready")[0] == 200, what="first ready")
        caller, answers = pre_stop_in_background(first)
        time.sleep(1.0)  # no successor yet: the hook holds and the pod still serves
        assert caller.is_alive()
        assert first.get("/ready")[0] == 200
        assert first.get("/health", first.api_port)[0] == 200
        second = start_entrypoint(data, tmp_path, "second", FAKE_IMPORT_SECONDS="0.5")
        caller.join(60)
        assert answers and answers[0][0] == 0, answers
        assert answers[0][1]["successor"] is True
        status, body = first.get("/ready")
        assert status == 503 and json.loads(body)["checks"] == {"stopping": "the pod is stopping"}
        assert first.stop() == 0
        wait_for(lambda: started(data, "second"), what="the successor's gateway")
        wait_for(lambda: second.get("/ready")[0] == 200, what="the successor ready")
    finally:
        first.proc.kill()
        if second is not None:
            assert second.stop() == 0, second.output()[-2000:]


def test_without_a_successor_pre_stop_gives_up_after_the_handover_wait(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    agent = start_entrypoint(
        data,
        tmp_path,
        "alone",
        HERMES_RUNTIME_HANDOVER_SECONDS="1",
        # Long enough that the stop comes within it on a loaded box.
        HERMES_RUNTIME_PRESTOP_SECONDS="8",
    )
    try:
        wait_for(lambda: agent.get("/ready")[0] == 200, what="ready")
        status, answer = agent.pre_stop(timeout=30)
        assert status == 0
        assert answer["successor"] is False and answer["waited_seconds"] >= 1.0
        assert agent.get("/ready")[0] == 503
    finally:
        assert agent.stop() == 0
    assert "agent.stop.reachable" in agent.output()  # stayed reachable after the gateway left


def test_a_library_touching_the_data_dir_before_the_lock_is_refused_then_run_fresh(
    tmp_path: Path,
) -> None:
    data = tmp_path / "data"
    data.mkdir()
    first = start_entrypoint(data, tmp_path, "first")
    second = None
    try:
        wait_for(lambda: started(data, "first"), what="the first gateway")
        second = start_entrypoint(
            data, tmp_path, "second", HERMES_RUNTIME_GATEWAY_PRELOAD="fake_heavy,fake_touch"
        )
        wait_for(lambda: waiting_successor(data / STATE), what="the second one warm")
        assert not (data / "touched-before-lock").exists()
        assert first.stop() == 0
        wait_for(lambda: started(data, "second"), what="the second gateway, started afresh")
        wait_for(lambda: second.get("/ready")[0] == 200, what="the second one ready")
    finally:
        first.proc.kill()
        if second is not None:
            assert second.stop() == 0, second.output()[-2000:]
    assert not (data / "touched-before-lock").exists()
    lines = second.output().splitlines()
    warm = [json.loads(line) for line in lines if '"agent.gateway.warm"' in line]
    assert warm and warm[0]["preload"]["touched"][0].startswith(f"open {data}/touched-before-lock")


def test_a_stopping_pod_sends_new_clients_to_its_successor_until_that_one_is_ready(
    tmp_path: Path,
) -> None:
    data = tmp_path / "data"
    data.mkdir()
    first = start_old_pod(
        data, tmp_path, HERMES_RUNTIME_PRESTOP_SECONDS="1", FAKE_DRAIN_SECONDS="1.0"
    )
    second = None
    try:
        wait_for(lambda: first.get("/ready")[0] == 200, what="first ready")
        second = start_entrypoint(
            data, tmp_path, "second", HERMES_RUNTIME_POD_IP="127.0.0.1", FAKE_START_SECONDS="1.0"
        )
        status, answer = first.pre_stop(timeout=60)
        assert status == 0 and answer["successor"] is True
        successor = waiting_successor(data / STATE)
        assert successor is not None and successor.host == "127.0.0.1"
        assert successor.api_port == second.api_port
        assert first.get("/ready")[0] == 200  # still the way in: the only endpoint
        first.proc.send_signal(signal.SIGTERM)
        wait_for(lambda: any(e.what == "end" for e in history(data)), what="first's gateway end")
        # First's gateway is gone; a client that still reaches the first pod is held and
        # answered by the second's gateway (which binds once it has the lock).
        status, body = first.get("/health", first.api_port, timeout=30)
        assert status == 200 and json.loads(body)["name"] == "second"
        assert first.proc.wait(60) == 0, first.output()[-2000:]
        assert second.get("/ready")[0] == 200
    finally:
        first.proc.kill()
        if second is not None:
            assert second.stop() == 0, second.output()[-2000:]
    output = first.output()
    assert "agent.handover.successor_ready" in output
    assert '"relay": true' in output
