"""Figures a CronJob can export: a Prometheus text file (node-exporter textfile style).

A failed run keeps the last success time of the previous file, so an alert
on "no success for 26 h" keeps working across failures.
"""

from __future__ import annotations

import contextlib
import time
from pathlib import Path

from prometheus_client import CollectorRegistry, Gauge, write_to_textfile
from prometheus_client.parser import text_string_to_metric_families

from hermes_runtime.backup.reports import BackupSummary

LAST_SUCCESS = "hermes_backup_last_success_timestamp_seconds"


def _previous_success(path: Path) -> float:
    with contextlib.suppress(OSError, ValueError):
        for family in text_string_to_metric_families(path.read_text()):
            for sample in family.samples:
                if sample.name == LAST_SUCCESS:
                    return float(sample.value)
    return 0.0


def write_backup_metrics(path: Path, summary: BackupSummary | None) -> None:
    """Write the figures of one ``create`` run; ``summary`` is None when it failed."""
    registry = CollectorRegistry()
    gauges = {
        name: Gauge(name, text, registry=registry)
        for name, text in (
            (LAST_SUCCESS, "Unix time of the last successful backup"),
            ("hermes_backup_last_run_timestamp_seconds", "Unix time of the last backup run"),
            ("hermes_backup_last_run_success", "1 if the last backup run succeeded, else 0"),
            ("hermes_backup_duration_seconds", "Wall time of the last successful backup"),
            ("hermes_backup_bytes_read", "Bytes read from the data dir by the last backup"),
            ("hermes_backup_bytes_uploaded", "Bytes uploaded to the target by the last backup"),
            ("hermes_backup_files", "Files in the last snapshot"),
            ("hermes_backup_databases", "SQLite databases in the last snapshot"),
        )
    }
    now = time.time()
    gauges["hermes_backup_last_run_timestamp_seconds"].set(now)
    if summary is None:
        gauges[LAST_SUCCESS].set(_previous_success(path))
        gauges["hermes_backup_last_run_success"].set(0)
    else:
        gauges[LAST_SUCCESS].set(now)
        gauges["hermes_backup_last_run_success"].set(1)
        gauges["hermes_backup_duration_seconds"].set(summary.duration_seconds)
        gauges["hermes_backup_bytes_read"].set(summary.bytes_read)
        gauges["hermes_backup_bytes_uploaded"].set(summary.bytes_uploaded)
        gauges["hermes_backup_files"].set(summary.files)
        gauges["hermes_backup_databases"].set(len(summary.databases))
    path.parent.mkdir(parents=True, exist_ok=True)
    write_to_textfile(str(path), registry)
