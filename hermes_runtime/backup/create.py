"""``backup create``: snapshot databases online, upload new blobs, write the manifest last."""

from __future__ import annotations

import contextlib
import os
import platform
import shutil
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TextIO

from hermes_runtime.backup.blobs import Spooled, spool_compressed
from hermes_runtime.backup.catalog import load_manifest, snapshot_ids, stored_blobs
from hermes_runtime.backup.dbsnap import DatabaseCheck, check_database, snapshot_database
from hermes_runtime.backup.manifest import (
    DatabaseRecord,
    DirRecord,
    FileRecord,
    LinkRecord,
    Manifest,
    blob_key,
    encode_manifest,
    manifest_key,
    new_snapshot_id,
)
from hermes_runtime.backup.selection import FoundFile, make_excluder, scan_data_dir
from hermes_runtime.backup.target import TEMP_MARKER, Target
from hermes_runtime.common.errors import RuntimeFailure
from hermes_runtime.common.logs import Reporter, reporter

PROGRESS_EVERY_SECONDS = 10.0


@dataclass
class BackupSummary:
    """What ``create`` did; ``--json`` prints it and the metrics file exports it."""

    id: str
    target: str
    duration_seconds: float
    bytes_read: int
    bytes_uploaded: int
    files: int
    files_uploaded: int
    files_unchanged: int
    databases: dict[str, dict[str, int]] = field(default_factory=dict)
    skipped: list[str] = field(default_factory=list)


@dataclass
class _Run:
    """Mutable state of one backup run (kept out of module globals)."""

    target: Target
    data_dir: Path
    work_dir: Path
    known_blobs: set[str]
    progress: Reporter
    total_bytes: int = 0
    progress_every: float = PROGRESS_EVERY_SECONDS
    bytes_done: int = 0
    last_progress_line: float = field(default_factory=time.monotonic)
    bytes_read: int = 0
    bytes_uploaded: int = 0
    files_uploaded: int = 0
    files_unchanged: int = 0
    skipped: list[str] = field(default_factory=list)

    def advance(self, size: int) -> None:
        """Move the bar; without a terminal, log a progress line every ``progress_every`` s.

        One large database can take minutes: a CronJob's log should show it moving.
        """
        self.bytes_done += size
        self.progress.advance(size)
        now = time.monotonic()
        if not self.progress.interactive and now - self.last_progress_line >= self.progress_every:
            self.last_progress_line = now
            self.progress.step("progress", bytes_done=self.bytes_done, bytes_total=self.total_bytes)

    def new_spool(self) -> Path:
        """A scratch file for one compressed body: in the target itself when it is a folder."""
        where = self.target.spool_dir() or self.work_dir
        fd, name = tempfile.mkstemp(prefix=TEMP_MARKER + "spool-", dir=where)
        os.close(fd)
        return Path(name)

    def upload(self, digest: str, spool: Path) -> None:
        try:
            if digest not in self.known_blobs:
                size = spool.stat().st_size
                self.target.put_file(blob_key(digest), spool)
                self.known_blobs.add(digest)
                self.bytes_uploaded += size
        finally:
            spool.unlink(missing_ok=True)


def create_backup(
    data_dir: Path,
    target: Target,
    *,
    excludes: tuple[str, ...] = (),
    default_excludes: bool = True,
    method: str = "backup",
    db_attempts: int = 5,
    work_dir: Path | None = None,
    stream: TextIO | None = None,
    progress_every: float = PROGRESS_EVERY_SECONDS,
) -> BackupSummary:
    """Take one snapshot of ``data_dir`` into ``target`` and return its summary."""
    if not data_dir.is_dir():
        raise RuntimeFailure(f"--data-dir {data_dir}: not a directory")
    data_dir = data_dir.resolve()
    started_at = datetime.now(UTC)
    started = time.monotonic()
    snapshot_id = new_snapshot_id(started_at)
    excluder = make_excluder(excludes, defaults=default_excludes)
    previous = _previous_files(target, data_dir)
    known = set(stored_blobs(target))
    selection = scan_data_dir(data_dir, excluder)
    scratch = Path(tempfile.mkdtemp(prefix="hermes-backup-", dir=work_dir))
    try:
        with reporter("backup.create", stream) as progress:
            progress.step(
                "started", snapshot=snapshot_id, target=target.url, data_dir=str(data_dir)
            )
            progress.start_task(f"backup {snapshot_id}", total=selection.total_bytes)
            run = _Run(
                target, data_dir, scratch, known, progress, selection.total_bytes, progress_every
            )
            try:
                databases = [
                    _backup_database(run, found, method, db_attempts)
                    for found in selection.databases
                ]
                files = [r for r in (_backup_file(run, f, previous) for f in selection.files) if r]
            except OSError as exc:  # scratch space full, unreadable file, ...
                raise RuntimeFailure(
                    f"backup of {data_dir} failed: {exc} (scratch space: {scratch})"
                ) from exc
            manifest = Manifest(
                id=snapshot_id,
                created_at=started_at.isoformat(),
                finished_at=datetime.now(UTC).isoformat(),
                source={"data_dir": str(data_dir), "host": platform.node()},
                excludes=list(excluder.patterns),
                databases=databases,
                files=files,
                links=[LinkRecord(link.relpath, link.target) for link in selection.links],
                dirs=[DirRecord(d.relpath, d.mode) for d in selection.dirs],
            )
            summary = _summary(run, manifest, time.monotonic() - started, selection.skipped_special)
            manifest.stats = {
                "duration_seconds": summary.duration_seconds,
                "bytes_read": summary.bytes_read,
                "bytes_uploaded": summary.bytes_uploaded,
            }
            # The manifest goes last: until it exists, the snapshot does not.
            encoded = encode_manifest(manifest)
            target.put_bytes(manifest_key(snapshot_id), encoded)
            summary.bytes_uploaded += len(encoded)
            progress.step("finished", snapshot=snapshot_id, bytes_uploaded=summary.bytes_uploaded)
            return summary
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _previous_files(target: Target, data_dir: Path) -> dict[str, FileRecord]:
    """Files of the newest readable snapshot of the same data dir.

    A file whose size, mtime and inode match its record there is not read
    again: its blob is reused (the restic/borg trick behind cheap incrementals).
    """
    for snapshot_id in reversed(snapshot_ids(target)):
        with contextlib.suppress(RuntimeFailure):
            manifest = load_manifest(target, snapshot_id)
            if manifest.source.get("data_dir") != str(data_dir):
                return {}
            return {f.path: f for f in manifest.files}
    return {}


def _backup_database(run: _Run, found: FoundFile, method: str, attempts: int) -> DatabaseRecord:
    source = run.data_dir / found.relpath
    snapshot = run.work_dir / "snapshot.db"
    try:
        seconds = snapshot_database(source, snapshot, method=method, attempts=attempts)
        check, spooled = _check_while_compressing(run, snapshot)
    finally:
        snapshot.unlink(missing_ok=True)  # before the kernel writes its dirty pages back
    if not check.ok:
        spooled.path.unlink(missing_ok=True)
        raise RuntimeFailure(
            f"database {source}: snapshot fails integrity_check: {check.integrity}"
        )
    run.bytes_read += found.size
    run.upload(spooled.digest, spooled.path)
    run.advance(max(0, found.size - spooled.raw_size))  # the bar counts source sizes
    run.progress.step(
        "database", path=found.relpath, bytes=spooled.raw_size, seconds=round(seconds, 3)
    )
    return DatabaseRecord(
        path=found.relpath,
        sha256=spooled.digest,
        size=spooled.raw_size,
        mode=found.mode,
        integrity=check.integrity,
        tables=check.tables,
        method=method,
        snapshot_seconds=round(seconds, 4),
    )


def _check_while_compressing(run: _Run, snapshot: Path) -> tuple[DatabaseCheck, Spooled]:
    """``integrity_check`` + row counts in a thread while the snapshot is hashed and compressed.

    apsw, hashlib and zstd all release the GIL, so the two reads of the
    snapshot overlap instead of adding up. Nothing is uploaded before the
    check has passed: the caller only uploads the spool afterwards.
    """
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="integrity-check") as checker:
        checking = checker.submit(check_database, snapshot)
        spool = run.new_spool()
        try:
            spooled = spool_compressed(snapshot, spool, run.advance)
        except BaseException:
            spool.unlink(missing_ok=True)
            raise
        return checking.result(), spooled


def _backup_file(run: _Run, found: FoundFile, previous: dict[str, FileRecord]) -> FileRecord | None:
    before = previous.get(found.relpath)
    if (
        before is not None
        and (before.size, before.mtime_ns, before.inode)
        == (found.size, found.mtime_ns, found.inode)
        and before.sha256 in run.known_blobs
    ):
        run.files_unchanged += 1
        run.advance(found.size)
        return FileRecord(
            found.relpath, before.sha256, found.size, found.mode, found.mtime_ns, found.inode
        )
    spool = run.new_spool()
    try:
        spooled = spool_compressed(run.data_dir / found.relpath, spool, run.advance)
    except FileNotFoundError:
        spool.unlink(missing_ok=True)
        run.skipped.append(found.relpath)  # deleted since the scan
        return None
    except PermissionError as exc:
        spool.unlink(missing_ok=True)
        raise RuntimeFailure(f"file {run.data_dir / found.relpath}: cannot read: {exc}") from exc
    run.bytes_read += spooled.raw_size
    if spooled.digest not in run.known_blobs:
        run.files_uploaded += 1
    run.upload(spooled.digest, spooled.path)
    run.advance(max(0, found.size - spooled.raw_size))
    return FileRecord(
        found.relpath, spooled.digest, spooled.raw_size, found.mode, found.mtime_ns, found.inode
    )


def _summary(run: _Run, manifest: Manifest, duration: float, special: list[str]) -> BackupSummary:
    return BackupSummary(
        id=manifest.id,
        target=run.target.url,
        duration_seconds=round(duration, 3),
        bytes_read=run.bytes_read,
        bytes_uploaded=run.bytes_uploaded,
        files=len(manifest.files),
        files_uploaded=run.files_uploaded,
        files_unchanged=run.files_unchanged,
        databases={d.path: d.tables for d in manifest.databases},
        skipped=run.skipped + special,
    )
