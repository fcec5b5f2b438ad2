#!/usr/bin/env python3
"""Generate docs/metrics.md: every Prometheus metric the runtime exposes, read from the code.

The metrics are collected from the runtime's own collectors, not listed by hand, so the
document cannot miss one or name one that is gone:

- the agent entrypoint's /metrics (chart value `metrics.port`): an ``AgentMetrics`` with a
  real backup status record, data volume and Vault refresh record, so every collector that
  depends on a file yields its series;
- the LCM engine's /metrics (`metrics.lcmPort`, served by the Hermes gateway process from
  prometheus_client's default registry): every module of ``hermes_runtime`` that imports
  prometheus_client is imported (found by reading the sources, so a module that moves is
  still found), and the default registry's collectors are read, prometheus_client's own
  process and platform collectors left out;
- the text file `hermes-runtime backup create --metrics-file` writes (node-exporter's
  textfile collector style).

`--check` exits 1 when docs/metrics.md differs from what this script makes (a test runs it);
otherwise the file is rewritten.
"""

from __future__ import annotations

import argparse
import importlib
import sys
import tempfile
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from generated import write_or_check  # noqa: E402  (ci/generated.py, beside this script)
from prometheus_client import REGISTRY, CollectorRegistry  # noqa: E402
from prometheus_client.metrics import MetricWrapperBase  # noqa: E402
from prometheus_client.parser import text_string_to_metric_families  # noqa: E402
from prometheus_client.registry import Collector  # noqa: E402

OUTPUT = REPO / "docs" / "metrics.md"
PACKAGE = REPO / "hermes_runtime"
# prometheus_client's own collectors in the default registry: not the runtime's figures.
CLIENT_PREFIXES = ("process_", "python_")
SUFFIX = {"counter": "_total"}


@dataclass(frozen=True)
class Metric:
    name: str  # as exposed (a counter with its _total)
    kind: str
    labels: tuple[str, ...]
    help: str

    def row(self) -> str:
        labels = ", ".join(f"`{label}`" for label in self.labels) or "none"
        text = self.help.replace("|", "\\|")
        return f"| `{self.name}` | {self.kind} | {labels} | {text} |"


def _from_collector(collector: Collector) -> Iterator[Metric]:
    """A collector's families; label names from the metric object, else from its samples."""
    declared = (
        getattr(collector, "_labelnames", None)
        if isinstance(collector, MetricWrapperBase)
        else None
    )
    for family in collector.collect():
        labels = set(declared or ())
        for sample in family.samples:
            labels.update(k for k in sample.labels if k not in {"le", "quantile"})
        name = family.name + SUFFIX.get(family.type, "")
        yield Metric(name, family.type, tuple(sorted(labels)), family.documentation)


def _from_registry(registry: CollectorRegistry) -> list[Metric]:
    collectors: Iterable[Collector] = list(registry._collector_to_names)
    found = {m.name: m for c in collectors for m in _from_collector(c)}
    return sorted(found.values(), key=lambda m: m.name)


def agent_metrics(scratch: Path) -> list[Metric]:
    """The entrypoint's registry with every file-backed collector fed a real record."""
    from hermes_runtime.agent import AgentMetrics
    from hermes_runtime.backup import record_backup_outcome
    from hermes_runtime.backup.reports import BackupSummary
    from hermes_runtime.vault.refreshstatus import record_refresh, refresh_status_path

    status = scratch / ".hermes-runtime" / "backup-status.json"
    status.parent.mkdir(parents=True)
    summary = BackupSummary("0123abcd", "file:///backup", 1.0, 10, 10, 1, 1, 0)
    record_backup_outcome(status, started_at=time.time() - 1, summary=summary)
    env_file = scratch / "secrets" / "agent.env"
    env_file.parent.mkdir()
    record_refresh([env_file], ok=True)
    metrics = AgentMetrics(
        backup_status_file=status,
        data_volume=scratch,
        secrets_refresh_status=refresh_status_path(env_file),
    )
    return _from_registry(metrics.registry)


def metric_modules() -> list[str]:
    """Every module of the package whose source imports prometheus_client."""
    names = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if "prometheus_client" in path.read_text(encoding="utf-8"):
            names.append(".".join(path.relative_to(REPO).with_suffix("").parts))
    return names


def lcm_metrics() -> list[Metric]:
    """The default registry after importing every module that declares metrics."""
    for name in metric_modules():
        importlib.import_module(name)
    return [m for m in _from_registry(REGISTRY) if not m.name.startswith(CLIENT_PREFIXES)]


def backup_file_metrics(scratch: Path) -> list[Metric]:
    from hermes_runtime.backup import write_backup_metrics

    path = scratch / "backup.prom"
    write_backup_metrics(path, None)
    found = [
        Metric(f.name + SUFFIX.get(f.type, ""), f.type, (), f.documentation)
        for f in text_string_to_metric_families(path.read_text(encoding="utf-8"))
    ]
    return sorted(found, key=lambda m: m.name)


HEADER = """# Metrics

Every Prometheus metric the runtime exposes, generated from the code by
`ci/gen-metrics-doc.py` (do not edit; `ci/gen-metrics-doc.py --check` is run by the tests).
The chart's alerts (docs/runbooks.md) and dashboard (`metrics.dashboard`) are built on them.
Through the chart's ServiceMonitor every series carries `job` (the release's full name),
`namespace` and `pod`. A histogram `x` is exposed as `x_bucket`, `x_sum` and `x_count`."""

SECTIONS = (
    (
        "The agent entrypoint (`metrics.port`, `/metrics`)",
        "The supervisor, the front door, `/ready`, the data volume, and what it reads from the "
        "backup's status record on the data volume and the Vault refresher's record (those "
        "series exist once the record does).",
    ),
    (
        "The LCM engine (`metrics.lcmPort`, `/metrics`)",
        "Served by the Hermes gateway process while LCM is the context engine (`lcm.enabled`); "
        "reset when the gateway restarts. prometheus_client's standard `process_*` and "
        "`python_*` series are served there too.",
    ),
    (
        "`hermes-runtime backup create --metrics-file`",
        "A text file for node-exporter's textfile collector, written after each run (the chart "
        "does not use it: its alerts read the status record through the agent).",
    ),
)


def render() -> str:
    with tempfile.TemporaryDirectory(prefix="metrics-doc-") as scratch:
        tables = [
            agent_metrics(Path(scratch) / "agent"),
            lcm_metrics(),
            backup_file_metrics(Path(scratch)),
        ]
    parts = [HEADER]
    for (title, text), metrics in zip(SECTIONS, tables, strict=True):
        parts.append(
            f"\n## {title}\n\n{text}\n\n| Metric | Type | Labels | Meaning |\n|---|---|---|---|"
        )
        parts.extend(m.row() for m in metrics)
    return "\n".join(parts) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if the file is out of date")
    parser.add_argument("--output", type=Path, default=OUTPUT, help="the document")
    args = parser.parse_args()
    return write_or_check(args.output, render(), "ci/gen-metrics-doc.py", args.check)


if __name__ == "__main__":
    sys.exit(main())
