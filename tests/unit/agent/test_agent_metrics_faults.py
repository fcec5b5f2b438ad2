"""The agent's fault metrics: crash restarts from 0, and the data volume's free space.

The alerts (charts/hermes-agent/templates/prometheusrule.yaml, HermesGatewayRestarting and
HermesDataVolumeFull) read these series; tests/e2e/test_alerts.py fires them for real.
"""

from __future__ import annotations

import os
from pathlib import Path

from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from hermes_runtime.agent import AgentMetrics


def samples(metrics: AgentMetrics) -> dict[str, float]:
    text = generate_latest(metrics.registry).decode()
    return {
        sample.name: sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if not sample.labels
    }


def test_crashes_are_counted_from_zero_and_planned_restarts_are_not() -> None:
    metrics = AgentMetrics()
    assert samples(metrics)["hermes_runtime_gateway_crashes_total"] == 0
    metrics.gateway_restarts.labels(reason="crash-SIGKILL").inc()
    metrics.gateway_restarts.labels(reason="crash-exit-1").inc(2)
    metrics.gateway_restarts.labels(reason="secrets-changed").inc()
    metrics.gateway_restarts.labels(reason="plugins-changed").inc()
    assert samples(metrics)["hermes_runtime_gateway_crashes_total"] == 3


def test_data_volume_free_bytes_follow_what_is_written(tmp_path: Path) -> None:
    status = tmp_path / ".hermes-runtime" / "backup-status.json"  # not made yet
    metrics = AgentMetrics(backup_status_file=status)
    before = samples(metrics)
    stats = os.statvfs(tmp_path)
    assert before["hermes_runtime_data_volume_size_bytes"] == stats.f_blocks * stats.f_frsize
    assert before["hermes_runtime_data_volume_free_bytes"] > 0
    assert (
        before["hermes_runtime_data_volume_free_bytes"]
        <= before["hermes_runtime_data_volume_size_bytes"]
    )
    explicit = AgentMetrics(data_volume=tmp_path)
    assert (
        samples(explicit)["hermes_runtime_data_volume_size_bytes"]
        == (before["hermes_runtime_data_volume_size_bytes"])
    )


def test_no_volume_no_volume_series() -> None:
    assert "hermes_runtime_data_volume_free_bytes" not in samples(AgentMetrics())
