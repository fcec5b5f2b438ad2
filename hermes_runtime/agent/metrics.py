"""Prometheus figures of the agent entrypoint: gateway restarts and crashes, plugin link
results, the front door's connections and its cap, the last /ready verdict, uptime, the data
volume's free space and reserve, the outcome of the last backups (read from the status record
on the data volume) and of the Vault refresher's last refresh. docs/metrics.md lists them all.

Each ``AgentMetrics`` owns its registry (no process-global collectors), so tests and several
supervisors in one process never clash.
"""

from __future__ import annotations

import os
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
from hermes_runtime.vault import read_refresh_status, refresh_status_path

# The front door's connection outcomes (frontdoor.py), each series exported from 0.
FRONT_DOOR_OUTCOMES = ("forwarded", "relayed", "gave_up", "refused", "full")


@dataclass
class AgentMetrics:
    registry: CollectorRegistry = field(default_factory=CollectorRegistry)
    started_at: float = field(default_factory=time.time)
    # The backup status record on the data volume (None: no backup figures).
    backup_status_file: Path | None = None
    # A path on the data volume whose filesystem the free-space gauges measure (None: the
    # backup status record's, which lives on the data volume; neither: no such gauges).
    data_volume: Path | None = None
    # The Vault refresher's status beside the agent's secrets file (None: no such series;
    # ``secrets_status_path`` gives it from the settings' secrets file).
    secrets_refresh_status: Path | None = None

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
            "to the successor pod while this one stops, gave_up (no gateway accepted within "
            "the hold time, or the pod is stopping), refused (503 at once: the front door "
            "already held its maximum of connections waiting for a gateway), or full (503 at "
            "once: the data volume's free space is under HERMES_RUNTIME_DATA_MIN_FREE_MIB).",
            ["outcome"],
            registry=self.registry,
        )
        for outcome in FRONT_DOOR_OUTCOMES:  # every series from 0: increase() sees the first
            self.front_door_connections.labels(outcome=outcome)
        self.front_door_max_held = Gauge(
            "hermes_runtime_front_door_max_held",
            "The most client connections the API port holds waiting for a gateway "
            "(HERMES_RUNTIME_FRONT_DOOR_MAX_HELD); past it new ones are refused.",
            registry=self.registry,
        )
        self.front_door_held = Gauge(
            "hermes_runtime_front_door_held",
            "Client connections on the API port waiting for a gateway now (capped by "
            "HERMES_RUNTIME_FRONT_DOOR_MAX_HELD).",
            registry=self.registry,
        )
        self.front_door_wait = Histogram(
            "hermes_runtime_front_door_wait_seconds",
            "Seconds a client connection waited for a gateway (long while one restarts).",
            buckets=(0.005, 0.05, 0.25, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0),
            registry=self.registry,
        )
        self.ready = Gauge(
            "hermes_runtime_ready",
            "1 when the last /ready answered 200 (the kubelet's readiness probe), 0 when it "
            "answered 503 (0 too before the first probe).",
            registry=self.registry,
        )
        self.data_volume_reserve = Gauge(
            "hermes_runtime_data_volume_reserve_bytes",
            "Free bytes the data volume keeps in reserve (HERMES_RUNTIME_DATA_MIN_FREE_MIB): "
            "under it the front door refuses new turns and /ready answers 503.",
            registry=self.registry,
        )
        uptime = Gauge(
            "hermes_runtime_uptime_seconds",
            "Seconds since the entrypoint started.",
            registry=self.registry,
        )
        uptime.set_function(lambda: time.time() - self.started_at)
        self.registry.register(GatewayCrashCollector(self.gateway_restarts))
        volume = self.data_volume or self.backup_status_file
        if volume is not None:
            self.registry.register(DataVolumeCollector(volume))
        if self.backup_status_file is not None:
            self.registry.register(BackupStatusCollector(self.backup_status_file))
        if self.secrets_refresh_status is not None:
            self.registry.register(SecretsRefreshCollector(self.secrets_refresh_status))

    def record_link_report(self, report: LinkReport) -> None:
        """Record one convergence: a gauge per plugin (1 linked, 0 failed) and its outcome."""
        for result in report.results:
            self.plugin_linked.labels(plugin=result.name).set(1 if result.error is None else 0)
        self.plugin_link_runs.labels(outcome="ok" if report.ok else "failed").inc()


def secrets_status_path(secrets_env: Path | None) -> Path | None:
    """Beside the agent's Vault env file (``AgentSettings.secrets_env``), where the refresher
    sidecar notes its outcome; no such file named: no Vault, no such series."""
    return refresh_status_path(secrets_env) if secrets_env is not None else None


class SecretsRefreshCollector(Collector):
    """The Vault refresher's last outcome (written by another container of the pod, read at
    each scrape): a Vault that cannot be reached shows as a failed refresh while the agent
    keeps its last secrets. No record (no refresher, or none yet): no series."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def describe(self) -> list[Metric]:
        return []

    def collect(self) -> Iterator[Metric]:
        status = read_refresh_status(self.path)
        if status is None:
            return
        yield GaugeMetricFamily(
            "hermes_runtime_secrets_refresh_ok",
            "1 if the Vault refresher's last refresh succeeded; 0: Vault unreachable or "
            "refusing, the last secrets kept.",
            value=1.0 if status.last_attempt_ok else 0.0,
        )
        yield GaugeMetricFamily(
            "hermes_runtime_secrets_refresh_last_success_timestamp_seconds",
            "Unix time of the Vault refresher's last successful refresh.",
            value=status.last_success_timestamp or 0.0,
        )
        yield CounterMetricFamily(
            "hermes_runtime_secrets_refresh_failures",
            "Failed refreshes of the Vault refresher in this pod.",
            value=status.failures_total,
        )


CRASH_REASON_PREFIX = "crash-"  # supervisor.crash_reason: crash-SIGKILL, crash-exit-1, ...


class GatewayCrashCollector(Collector):
    """``hermes_runtime_gateway_crashes_total``: the crash restarts, one series from 0.

    Why not alert on the restart counter itself: its series per reason appears with the
    first crash (at 1), and Prometheus' ``increase()`` never counts a series' first sample,
    so the first crash of every reason would be missed. This sum of the ``crash-*`` reasons
    exists from the start, at 0, and planned restarts (new plugins, rotated secrets, SIGHUP)
    are left out: they are not a sick gateway.
    """

    def __init__(self, restarts: Counter) -> None:
        self.restarts = restarts

    def describe(self) -> list[Metric]:
        return []  # computed from another collector at scrape time

    def collect(self) -> Iterator[Metric]:
        crashes = sum(
            sample.value
            for family in self.restarts.collect()
            for sample in family.samples
            if sample.name.endswith("_total")
            and sample.labels.get("reason", "").startswith(CRASH_REASON_PREFIX)
        )
        yield CounterMetricFamily(
            "hermes_runtime_gateway_crashes",
            "Gateway crashes the supervisor restarted in place (the crash-* reasons of "
            "hermes_runtime_gateway_restarts_total, summed; present from 0).",
            value=crashes,
        )


class DataVolumeCollector(Collector):
    """Free and total bytes of the filesystem holding the data volume, read at each scrape.

    Why the agent exports them: the kubelet's volume stats (kubelet_volume_stats_*) are not
    scraped everywhere, and a full data volume stops Hermes from writing its databases. The
    figures are those of an unprivileged writer (``f_bavail``), the agent's own view.
    """

    def __init__(self, path: Path) -> None:
        self.path = path

    def describe(self) -> list[Metric]:
        return []  # dynamic: absent while the path cannot be measured

    def collect(self) -> Iterator[Metric]:
        try:
            stats = os.statvfs(existing_ancestor(self.path))
        except OSError as exc:
            log_event("agent.metrics.data_volume_unreadable", path=str(self.path), error=str(exc))
            return
        yield GaugeMetricFamily(
            "hermes_runtime_data_volume_free_bytes",
            "Bytes the agent can still write on the data volume (statvfs f_bavail).",
            value=float(stats.f_bavail * stats.f_frsize),
        )
        yield GaugeMetricFamily(
            "hermes_runtime_data_volume_size_bytes",
            "Size of the data volume's filesystem in bytes (statvfs f_blocks).",
            value=float(stats.f_blocks * stats.f_frsize),
        )


def existing_ancestor(path: Path) -> Path:
    """``path`` or its nearest existing parent: the status record appears with the first
    backup, its folder may not exist yet, and the filesystem is the same."""
    for candidate in (path, *path.parents):
        if candidate.exists():
            return candidate
    return path


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
