"""The outcome of the last backup runs, kept on the data volume for the agent's ``/metrics``.

Why a file on the data volume and not a Pushgateway or a metrics file in the Job:
the backup Job is short-lived and may run in its own pod, while the agent pod
mounts the same volume for its whole life and is what Prometheus scrapes. The
agent reads this record at scrape time, so "no backup for two days" and "the
last backup failed" can be alerted on from the agent's own endpoint.

The file is small JSON, replaced atomically (temp file + rename): a scrape never
sees half a record, and a crash during the write keeps the previous outcome.

The folder it lives in (``.hermes-runtime``) is the agent's too, and the agent is the least
trusted process of the pod, while the backup that writes the record holds the repository's
keys. So the record is read and written as hostile ground: its folder opened without
following a link, the record read only if it is a regular file of bounded size (a planted
link, FIFO or huge file is refused, never followed, waited on or loaded), each field checked
for its type, and the temp file created beneath that folder's descriptor with ``O_EXCL |
O_NOFOLLOW`` and renamed over the record there (a rename replaces a planted link, never
writes through it).
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import stat
import time
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from hermes_runtime.backup.reports import BackupSummary
from hermes_runtime.common.errors import RuntimeFailure

# Relative to the data dir; left out of backups (see selection.DEFAULT_EXCLUDES):
# a restored status would describe another volume's history.
STATUS_RELPATH = ".hermes-runtime/backup-status.json"
STATUS_FORMAT = 1
MAX_ERROR_CHARS = 2000
MAX_RECORD_BYTES = 64 * 1024  # a record is under 3 KiB; anything larger was planted
RECORD_MODE = 0o644  # the agent (another UID) reads it for /metrics
READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
WRITE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


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

    A file that is not a status record (a link, a FIFO, too large, not JSON, a field of the
    wrong type) raises ``RuntimeFailure`` naming it.
    """
    try:
        text = _read_record(path)
        if text is None:
            return None
        raw = json.loads(text)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise RuntimeFailure(f"backup status {path}: unreadable: {exc}") from exc
    if not isinstance(raw, dict) or raw.get("format") != STATUS_FORMAT:
        raise RuntimeFailure(f"backup status {path}: not a format-{STATUS_FORMAT} status record")
    known = {f.name: f for f in fields(BackupStatus)}
    values = {k: v for k, v in raw.items() if k in known}
    for name, value in values.items():
        if not _has_type(value, FIELD_TYPES[name]):
            raise RuntimeFailure(f"backup status {path}: field {name!r} has the wrong type")
    try:
        return BackupStatus(**values)
    except TypeError as exc:
        raise RuntimeFailure(f"backup status {path}: {exc}") from exc


_NUMBER = (int, float)
FIELD_TYPES: dict[str, tuple[type, ...]] = {
    "last_attempt_timestamp": _NUMBER,
    "last_attempt_ok": (bool,),
    "last_duration_seconds": _NUMBER,
    "last_success_timestamp": (*_NUMBER, type(None)),
    "snapshot": (str, type(None)),
    "bytes_added": (int,),
    "databases": (list,),
    "error": (str, type(None)),
    "failures_total": (int,),
    "target": (str,),
    "format": (int,),
}


def _has_type(value: Any, types: tuple[type, ...]) -> bool:
    if isinstance(value, bool) and bool not in types:
        return False
    if isinstance(value, list):
        return list in types and all(isinstance(item, str) for item in value)
    return isinstance(value, types)


def _open_folder(folder: Path) -> int:
    """The record's folder, not what a link planted in its place points to."""
    try:
        return os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):
            raise OSError(exc.errno, "a link or no folder, refused", str(folder)) from exc
        raise


def _read_record(path: Path) -> str | None:
    """The record's text, None when there is none; only a regular file, never through a link,
    never waiting on a FIFO (``O_NONBLOCK``), at most ``MAX_RECORD_BYTES``."""
    try:
        folder = _open_folder(path.parent)
    except FileNotFoundError:
        return None
    try:
        fd = os.open(path.name, READ_FLAGS, dir_fd=folder)
    except FileNotFoundError:
        return None
    finally:
        os.close(folder)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(errno.EINVAL, "not a regular file", str(path))
        data = b""
        while chunk := os.read(fd, MAX_RECORD_BYTES + 1 - len(data)):
            data += chunk
            if len(data) > MAX_RECORD_BYTES:
                raise OSError(errno.EFBIG, f"larger than {MAX_RECORD_BYTES} bytes", str(path))
    finally:
        os.close(fd)
    return data.decode("utf-8")


def _write_record(path: Path, text: str) -> None:
    """Replace the record: a new temp file beneath the checked folder, fsync, rename there."""
    path.parent.mkdir(parents=True, exist_ok=True)
    folder = _open_folder(path.parent)
    try:
        tmp = f".{path.name}.{os.urandom(6).hex()}.tmp"
        fd = os.open(tmp, WRITE_FLAGS, RECORD_MODE, dir_fd=folder)
        try:
            os.fchmod(fd, RECORD_MODE)  # the agent reads it, whatever this process's umask
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                fh.write(text)
                fh.flush()
                os.fsync(fh.fileno())
            os.rename(tmp, path.name, src_dir_fd=folder, dst_dir_fd=folder)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp, dir_fd=folder)
            raise
        os.fsync(folder)
    finally:
        os.close(folder)


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
    try:
        _write_record(path, json.dumps(asdict(status), indent=2, sort_keys=True) + "\n")
    except OSError as exc:
        raise RuntimeFailure(f"backup status {path}: cannot write it: {exc}") from exc
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
