"""The outcome of the last backup runs, kept on the data volume for the agent's ``/metrics``.

Why a file on the data volume and not a Pushgateway or a metrics file in the Job:
the backup Job is short-lived and may run in its own pod, while the agent pod
mounts the same volume for its whole life and is what Prometheus scrapes. The
agent reads this record at scrape time, so "no backup for two days" and "the
last backup failed" can be alerted on from the agent's own endpoint.

The file is small JSON, replaced atomically (temp file + rename): a scrape never
sees half a record, and a crash during the write keeps the previous outcome.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from hermes_runtime.backup.reports import BackupSummary
from hermes_runtime.common.atomic import atomic_write_text
from hermes_runtime.common.errors import RuntimeFailure

# Relative to the data dir; left out of backups (see selection.DEFAULT_EXCLUDES):
# a restored status would describe another volume's history.
STATUS_RELPATH = ".hermes-runtime/backup-status.json"
STATUS_FORMAT = 1
MAX_ERROR_CHARS = 2000


@dataclass
class BackupStatus:
    """The last attempt, the last success and the failures counted on this volume."""

    last_attempt_timestamp: float
    last_attempt_ok: bool
    last_duration_seconds: float
    last_success_timestamp: float | None = None
    snapshot: str | None = None
    bytes_added: int = 0
    databases: list[str] = field(default_factory=list)
    error: str | None = None
    failures_total: int = 0
    target: str = ""
    format: int = STATUS_FORMAT


def backup_status_path(data_dir: Path) -> Path:
    """Where ``backup create`` records its outcome for the data dir ``data_dir``."""
    return data_dir / STATUS_RELPATH


def read_backup_status(path: Path) -> BackupStatus | None:
    """The recorded status, or None when no backup has recorded one yet.

    A file that is not a status record raises ``RuntimeFailure`` naming it.
    """
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise RuntimeFailure(f"backup status {path}: unreadable: {exc}") from exc
    if not isinstance(raw, dict) or raw.get("format") != STATUS_FORMAT:
        raise RuntimeFailure(f"backup status {path}: not a format-{STATUS_FORMAT} status record")
    known = {f.name for f in fields(BackupStatus)}
    try:
        return BackupStatus(**{k: v for k, v in raw.items() if k in known})
    except TypeError as exc:
        raise RuntimeFailure(f"backup status {path}: {exc}") from exc


def record_backup_outcome(
    path: Path,
    *,
    started_at: float,
    summary: BackupSummary | None,
    error: str | None = None,
    target: str = "",
    now: float | None = None,
) -> BackupStatus:
    """Record one ``create`` run: ``summary`` when it succeeded, else ``error``.

    The last success (time, snapshot, bytes added, databases) survives a failed
    run, and the failure counter only grows, so both alerts keep working across
    failures. An unreadable previous record is replaced rather than blocking the
    record of this run.
    """
    ended = time.time() if now is None else now
    try:
        previous = read_backup_status(path)
    except RuntimeFailure:
        previous = None
    status = _next_status(previous, started_at, ended, summary, error, target)
    atomic_write_text(path, json.dumps(asdict(status), indent=2, sort_keys=True) + "\n")
    return status


def _next_status(
    previous: BackupStatus | None,
    started_at: float,
    ended: float,
    summary: BackupSummary | None,
    error: str | None,
    target: str,
) -> BackupStatus:
    duration = round(max(0.0, ended - started_at), 3)
    if summary is not None:
        return BackupStatus(
            last_attempt_timestamp=ended,
            last_attempt_ok=True,
            last_duration_seconds=duration,
            last_success_timestamp=ended,
            snapshot=summary.id,
            bytes_added=summary.bytes_uploaded,
            databases=sorted(summary.databases),
            failures_total=previous.failures_total if previous else 0,
            target=summary.target or target,
        )
    kept: dict[str, Any] = {}
    if previous is not None:
        kept = {
            "last_success_timestamp": previous.last_success_timestamp,
            "snapshot": previous.snapshot,
            "bytes_added": previous.bytes_added,
            "databases": previous.databases,
        }
    return BackupStatus(
        last_attempt_timestamp=ended,
        last_attempt_ok=False,
        last_duration_seconds=duration,
        error=(error or "unknown error")[:MAX_ERROR_CHARS],
        failures_total=(previous.failures_total if previous else 0) + 1,
        target=target,
        **kept,
    )
