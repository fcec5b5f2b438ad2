"""The restart path's safety rules: whose drain marker, which PID."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from hermes_runtime.agent.restart import (
    DRAIN_MARKER,
    DRAIN_PRINCIPAL,
    _process_alive,
    active_agent_count,
    begin_drain,
    clear_own_drain,
    gateway_pid,
    request_gateway_restart,
)
from hermes_runtime.common.errors import RuntimeFailure


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
