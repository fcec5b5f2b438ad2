"""``backup create``: stage the data dir (``staging``) and store it with ``restic backup``.

restic gets the staged tree as ``.`` from its fixed path, with ``--ignore-inode
--ignore-ctime`` (staging copies every file: only size and mtime tell restic a file is
unchanged, so unchanged files are not read again). restic deduplicates by content-defined
chunks, compresses, encrypts, and writes the snapshot last: a backup killed at any point
leaves no snapshot, only unreferenced data that ``prune`` collects.
"""

from __future__ import annotations

import os
import platform
import re
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TextIO

from hermes_runtime.backup.manifest import TreeManifest
from hermes_runtime.backup.reports import BackupSummary
from hermes_runtime.backup.restic import (
    RETRY_LOCK,
    ResticRepository,
    require_folder,
    run_restic,
    stream_restic,
)
from hermes_runtime.backup.restic_errors import EXIT_INCOMPLETE, ResticFailed
from hermes_runtime.backup.selection import make_excluder, scan_data_dir
from hermes_runtime.backup.snapshots import (
    BACKUP_ID_TAG,
    DATABASES_TAG,
    FILES_TAG,
    TAG,
    find_snapshot,
    label_tag,
)
from hermes_runtime.backup.staging import STAGE_NAME, empty_stage, exclusive, stage_tree
from hermes_runtime.common.errors import RuntimeFailure
from hermes_runtime.common.logs import Reporter, reporter

FULL_ID = re.compile(r"[0-9a-f]{64}")  # a whole snapshot id, as restic prints it since 0.17
PROGRESS_EVERY_SECONDS = 10.0


def create_backup(
    data_dir: Path,
    repo: ResticRepository,
    *,
    excludes: tuple[str, ...] = (),
    default_excludes: bool = True,
    work_dir: Path | None = None,
    db_attempts: int = 5,
    stream: TextIO | None = None,
    progress_every: float = PROGRESS_EVERY_SECONDS,
    labels: dict[str, str] | None = None,
    between_scan_and_copy: Callable[[], None] | None = None,
) -> BackupSummary:
    """Stage ``data_dir`` (database snapshots, other files, manifest) and back it up with restic.

    The data dir is read as hostile input (``staging.stage_tree``, which also runs
    ``between_scan_and_copy``).
    """
    if not data_dir.is_dir():
        raise RuntimeFailure(f"--data-dir {data_dir}: not a directory")
    tags = [label_tag(key, value) for key, value in (labels or {}).items()]  # before any work
    data_dir = data_dir.resolve()
    started = time.monotonic()
    excluder = make_excluder(excludes, defaults=default_excludes)
    selection = scan_data_dir(data_dir, excluder)
    stage = Path(work_dir or tempfile.gettempdir()) / STAGE_NAME
    manifest = TreeManifest(
        created_at=datetime.now(UTC).isoformat(),
        source={"data_dir": str(data_dir), "host": platform.node()},
        excludes=list(excluder.patterns),
        backup_id=os.urandom(16).hex(),
    )
    with exclusive(stage), reporter("backup.create", stream) as progress:
        repo = repo.with_messages_to(lambda line: progress.relay("restic", line))
        progress.step("started", target=repo.url, data_dir=str(data_dir), scratch=str(stage))
        progress.start_task(f"backup {data_dir.name}", total=selection.total_bytes)
        with empty_stage(stage):
            try:
                stage_tree(
                    data_dir, stage, selection, manifest, db_attempts, progress,
                    between_scan_and_copy,
                )  # fmt: skip
            except OSError as exc:
                raise RuntimeFailure(
                    f"backup of {data_dir} failed: {exc} (scratch space: {stage})"
                ) from exc
            uploading = time.monotonic()
            summary = _upload(repo, stage, manifest, _Meter(progress, progress_every), tags)
            restic_seconds = time.monotonic() - uploading
        snapshot_id = _snapshot_id(repo, summary)
        added = int(summary.get("data_added_packed", summary.get("data_added", 0)))
        progress.step(
            "finished",
            snapshot=snapshot_id,
            bytes_uploaded=added,
            restic_seconds=round(restic_seconds, 3),
        )
    return BackupSummary(
        id=snapshot_id,
        target=repo.url,
        duration_seconds=round(time.monotonic() - started, 3),
        bytes_read=int(summary.get("total_bytes_processed", 0)),
        bytes_uploaded=added,
        files=manifest.files,
        files_uploaded=int(summary.get("files_new", 0)) + int(summary.get("files_changed", 0)),
        files_unchanged=int(summary.get("files_unmodified", 0)),
        databases={path: record.tables for path, record in manifest.databases.items()},
        skipped=selection.skipped_special,
    )


def _upload(
    repo: ResticRepository,
    stage: Path,
    manifest: TreeManifest,
    meter: _Meter,
    labels: list[str],
) -> dict[str, Any]:
    """``restic backup`` of the staged tree: restic's summary record."""
    require_folder(repo)  # an unmounted backup volume fails; restic init would fill the mount point
    # Shown by list, no dump needed.
    args = [*RETRY_LOCK, "backup", "--json", "--host", repo.agent, "--tag", TAG]
    args += ["--tag", f"{DATABASES_TAG}{len(manifest.databases)}"]
    args += ["--tag", f"{FILES_TAG}{manifest.files + len(manifest.databases)}"]
    args += ["--tag", f"{BACKUP_ID_TAG}{manifest.backup_id}"]
    for label in labels:
        args += ["--tag", label]
    args += ["--ignore-inode", "--ignore-ctime", "."]
    try:
        records = stream_restic(
            _temp_in(repo, stage.parent), args, meter.record, cwd=stage, create_missing=True
        )
    except ResticFailed as exc:
        if exc.code == EXIT_INCOMPLETE:
            _remove_incomplete(repo, exc)
        raise
    return _summary(records)


def _summary(records: list[dict[str, Any]]) -> dict[str, Any]:
    return next((r for r in records if r.get("message_type") == "summary"), {})


def _remove_incomplete(repo: ResticRepository, failed: ResticFailed) -> None:
    """restic saved a snapshot without every file it was given (exit 3): it must not stand.

    A restore would bring back a data dir with files missing and nothing saying so. The
    snapshot is forgotten (its data goes with the next prune) and the failure says which.
    """
    snapshot_id = str(_summary(failed.records).get("snapshot_id") or "")
    if not snapshot_id:
        raise RuntimeFailure(f"{failed}; restic printed no snapshot id: none was saved") from failed
    try:
        run_restic(repo, ["forget", snapshot_id])
    except RuntimeFailure as exc:
        raise RuntimeFailure(
            f"{failed}; its incomplete snapshot {snapshot_id} could not be removed ({exc}): "
            f"remove it with restic forget {snapshot_id}"
        ) from failed
    raise RuntimeFailure(f"{failed}; its incomplete snapshot {snapshot_id} was removed") from failed


def _snapshot_id(repo: ResticRepository, summary: dict[str, Any]) -> str:
    if not summary.get("snapshot_id"):
        raise RuntimeFailure(f"restic backup on {repo.url} printed no snapshot id")
    snapshot_id = str(summary["snapshot_id"])
    if not FULL_ID.fullmatch(snapshot_id):  # older restic printed a short one
        snapshot_id = find_snapshot(repo, snapshot_id).id
    return snapshot_id


def _temp_in(repo: ResticRepository, scratch: Path) -> ResticRepository:
    """restic with its temporary pack files (16 MiB each, several at once) in ``scratch``.

    restic writes every pack to a temporary file in ``$TMPDIR`` before uploading it. In the
    chart's backup pod ``/tmp`` is a small emptyDir (``agent.tmpSizeLimit``): the packs
    belong on the scratch volume sized for the backup, like the staged snapshots.
    """
    return replace(repo, env={**repo.env, "TMPDIR": str(scratch)})


@dataclass
class _Meter:
    """Turns restic's status records into our bar, or a progress line every few seconds."""

    progress: Reporter
    every: float
    done: int = 0
    last_line: float = field(default_factory=time.monotonic)

    def record(self, record: dict[str, Any]) -> None:
        if record.get("message_type") != "status":
            return
        bytes_done = int(record.get("bytes_done", 0))
        self.progress.advance(max(0, bytes_done - self.done))
        self.done = max(self.done, bytes_done)
        now = time.monotonic()
        due = now - self.last_line >= self.every and bytes_done > 0
        if not self.progress.interactive and due:
            self.last_line = now
            self.progress.step(
                "progress", bytes_done=bytes_done, bytes_total=int(record.get("total_bytes", 0))
            )
