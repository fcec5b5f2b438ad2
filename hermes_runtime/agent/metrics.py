"""Prometheus figures of the agent entrypoint: gateway restarts, plugin link results, uptime.

Each ``AgentMetrics`` owns its registry (no process-global collectors), so tests and several
supervisors in one process never clash.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from prometheus_client import CollectorRegistry, Counter, Gauge

from hermes_runtime.plugins import LinkReport


@dataclass
class AgentMetrics:
    registry: CollectorRegistry = field(default_factory=CollectorRegistry)
    started_at: float = field(default_factory=time.time)

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
        uptime = Gauge(
            "hermes_runtime_uptime_seconds",
            "Seconds since the entrypoint started.",
            registry=self.registry,
        )
        uptime.set_function(lambda: time.time() - self.started_at)

    def record_link_report(self, report: LinkReport) -> None:
        """Record one convergence: a gauge per plugin (1 linked, 0 failed) and its outcome."""
        for result in report.results:
            self.plugin_linked.labels(plugin=result.name).set(1 if result.error is None else 0)
        self.plugin_link_runs.labels(outcome="ok" if report.ok else "failed").inc()
