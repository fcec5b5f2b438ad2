"""A gateway killed with SIGKILL is restarted inside the running entrypoint (no container exit)."""

from __future__ import annotations

import os
import signal
from pathlib import Path

from fake_gateway import history, start_entrypoint, wait_for


def metric(text: str, line_start: str) -> float | None:
    for line in text.splitlines():
        if line.startswith(line_start):
            return float(line.rsplit(" ", 1)[1])
    return None


def test_a_killed_gateway_is_restarted_in_place_and_counted(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    agent = start_entrypoint(data, tmp_path, "agent")
    try:
        wait_for(lambda: agent.get("/ready")[0] == 200, what="/ready")
        first = history(data)[0].pid
        os.kill(first, signal.SIGKILL)
        wait_for(lambda: len(history(data)) == 2, what="a second gateway")
        assert history(data)[1].what == "start" and history(data)[1].pid != first
        wait_for(lambda: agent.get("/ready")[0] == 200, what="/ready again")
        assert agent.proc.poll() is None  # the entrypoint (the container) never exited
        metrics = agent.get("/metrics")[1]
        reason = 'hermes_runtime_gateway_restarts_total{reason="crash-SIGKILL"}'
        assert metric(metrics, reason) == 1
        assert metric(metrics, "hermes_runtime_gateway_starts_total") == 2
    finally:
        status = agent.stop()
    assert status == 0, agent.output()[-2000:]
    assert '"event": "agent.gateway.crashed"' in agent.output()
