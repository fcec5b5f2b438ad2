"""The series the on-call alerts read besides the fault ones: readiness, the front door's cap
and outcomes from 0, the data volume's reserve.

A real ``Endpoints`` server answers ``/ready`` over TCP and its ``/metrics`` then carries the
verdict (charts/hermes-agent/templates/prometheusrule.yaml, HermesAgentUnready).
"""

from __future__ import annotations

import asyncio
import urllib.error
import urllib.request
from pathlib import Path

from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families
from support.net import free_port

from hermes_runtime.agent import AgentMetrics
from hermes_runtime.agent.endpoints import Endpoints, Readiness
from hermes_runtime.agent.metrics import FRONT_DOOR_OUTCOMES


def series(metrics: AgentMetrics) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    text = generate_latest(metrics.registry).decode()
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def test_every_front_door_outcome_is_exported_from_zero() -> None:
    found = series(AgentMetrics())
    for outcome in FRONT_DOOR_OUTCOMES:
        key = ("hermes_runtime_front_door_connections_total", (("outcome", outcome),))
        assert found[key] == 0, outcome
    assert found[("hermes_runtime_ready", ())] == 0  # not ready before the first probe


def status_of(port: int) -> int:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/ready", timeout=10) as answer:
            return int(answer.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)


def test_ready_gauge_follows_the_last_ready_answer(tmp_path: Path) -> None:
    metrics = AgentMetrics()
    running = {"gateway": False}
    state = tmp_path / "state"
    state.mkdir()
    readiness = Readiness(
        tmp_path, state, ("127.0.0.1", 9), gateway_running=lambda: running["gateway"]
    )
    port = free_port()

    async def scenario() -> list[tuple[int, float]]:
        endpoints = Endpoints(metrics, readiness, port, host="127.0.0.1")
        await endpoints.start()
        seen = []
        try:
            for gateway in (False, True):
                running["gateway"] = gateway
                # With a "running" gateway on port 9 (nothing listens) the check still fails:
                # then say it is restarting, which /ready counts as ready.
                readiness.gateway_restarting = lambda gateway=gateway: gateway
                status = await asyncio.to_thread(status_of, port)
                seen.append((status, series(metrics)[("hermes_runtime_ready", ())]))
        finally:
            await endpoints.stop()
        return seen

    assert asyncio.run(scenario()) == [(503, 0.0), (200, 1.0)]


def test_cap_and_reserve_gauges_hold_what_they_are_set_to() -> None:
    metrics = AgentMetrics()
    metrics.front_door_max_held.set(7)
    metrics.data_volume_reserve.set(8 << 20)
    found = series(metrics)
    assert found[("hermes_runtime_front_door_max_held", ())] == 7
    assert found[("hermes_runtime_data_volume_reserve_bytes", ())] == 8 << 20
