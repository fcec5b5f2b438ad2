"""Prometheus figures of the agent entrypoint: gateway restarts, plugin link results, uptime,
and the outcome of the last backups (read from the status record on the data volume).

Each ``AgentMetrics`` owns its registry (no process-global collectors), so tests and several
supervisors in one process never clash.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from hermes_runtime.backup import read_backup_status
from hermes_runtime.common.errors import RuntimeFailure
from hermes_runtime.common.logs import log_event
from hermes_runtime.plugins import LinkReport


@dataclass
class AgentMetrics:
    registry: CollectorRegistry = field(default_factory=CollectorRegistry)
    started_at: float = field(default_factory=time.time)
    # The backup status record on the data volume (None: no backup figures).
    backup_status_file: Path | None = None

    def __post_init__(self) -> None:
        self.gateway_restarts = Counter(
            "hermes_runtime_gateway_restarts",
            "Gateway restarts by the entrypoint's supervisor, by reason: crash-SIGKILL, "
            "crash-exit-N (a crash restarted in place), plugins-changed, secrets-changed, "
            "sighup, gateway-requested.",
            ["reason"],
            registry=self.registry,
        )
        self.gateway_up = Gauge(
            "hermes_runtime_gateway_up",
            "1 while the Hermes gateway child process is running.",
            registry=self.registry,
        )
        self.gateway_starts = Counter(
            "hermes_runtime_gateway_starts",
            "Gateway child processes started.",
            registry=self.registry,
        )
        self.plugin_linked = Gauge(
            "hermes_runtime_plugin_linked",
            "1 when the last link of the plugin succeeded, 0 when it failed.",
            ["plugin"],
            registry=self.registry,
        )
        self.plugin_link_runs = Counter(
            "hermes_runtime_plugin_link_runs",
            "Plugin link passes, by outcome (ok / failed).",
            ["outcome"],
            registry=self.registry,
        )
        self.front_door_connections = Counter(
            "hermes_runtime_front_door_connections",
            "Client connections on the API port, by outcome: forwarded to a gateway, relayed "
            "to the successor pod while this one stops, or gave_up (no gateway accepted within "
            "the hold time, or the pod is stopping).",
            ["outcome"],
            registry=self.registry,
        )
        self.front_door_wait = Histogram(
            "hermes_runtime_front_door_wait_seconds",
            "Seconds a client connection waited for a gateway (long while one restarts).",
            buckets=(0.005, 0.05, 0.25, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0),
            registry=self.registry,
        )
        uptime = Gauge(
            "hermes_runtime_uptime_seconds",
            "Seconds since the entrypoint started.",
            registry=self.registry,
        )
        uptime.set_function(lambda: time.time() - self.started_at)
        if self.backup_status_file is not None:
            self.registry.register(BackupStatusCollector(self.backup_status_file))

    def record_link_report(self, report: LinkReport) -> None:
        """Record one convergence: a gauge per plugin (1 linked, 0 failed) and its outcome."""
        for result in report.results:
            self.plugin_linked.labels(plugin=result.name).set(1 if result.error is None else 0)
        self.plugin_link_runs.labels(outcome="ok" if report.ok else "failed").inc()


class BackupStatusCollector(Collector):
    """Exports the backup status record at every scrape (the backup Job writes it).

    Read at scrape time, not cached: the Job runs in another pod and only shares the volume.
    Without a record (no backup yet, or an unreadable one) no backup series is exported, so
    the "backup missing" alert (which also covers an absent series) fires once the agent has
    run longer than the allowed gap.
    """

    def __init__(self, path: Path) -> None:
        self.path = path

    def describe(self) -> list[Metric]:
        return []  # dynamic: whether the series exist depends on the file

    def collect(self) -> Iterator[Metric]:
        try:
            status = read_backup_status(self.path)
        except RuntimeFailure as exc:
            log_event("agent.metrics.backup_status_unreadable", error=str(exc))
            return
        if status is None:
            return
        gauges = (
            (
                "hermes_backup_last_attempt_timestamp_seconds",
                "Unix time the last backup run ended (success or failure).",
                status.last_attempt_timestamp,
            ),
            (
                "hermes_backup_last_success_timestamp_seconds",
                "Unix time of the last successful backup (0: none recorded yet).",
                status.last_success_timestamp or 0.0,
            ),
            (
                "hermes_backup_last_run_success",
                "1 if the last backup run succeeded, else 0.",
                1.0 if status.last_attempt_ok else 0.0,
            ),
            (
                "hermes_backup_last_duration_seconds",
                "Wall time of the last backup run.",
                status.last_duration_seconds,
            ),
            (
                "hermes_backup_last_bytes_added",
                "Bytes the last successful backup added to the repository.",
                float(status.bytes_added),
            ),
            (
                "hermes_backup_last_databases",
                "SQLite databases in the last successful snapshot.",
                float(len(status.databases)),
            ),
        )
        for name, text, value in gauges:
            yield GaugeMetricFamily(name, text, value=value)
        yield CounterMetricFamily(
            "hermes_backup_failures",
            "Failed backup runs recorded on this data volume.",
            value=status.failures_total,
        )
