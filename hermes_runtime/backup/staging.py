"""The tree ``create`` hands restic: database snapshots, checked, beside copies of the rest.

Our part, which restic cannot do: take a one-step online snapshot of every SQLite database,
run ``PRAGMA quick_check`` on the copy (every b-tree; the virtual tables' own checks, FTS5's
re-tokenising of every row, are left to ``verify``), count its rows, hash it. The other
files are copied with their modes and mtimes, symlinks and empty folders recreated, and our
manifest written at ``.hermes-backup/manifest.json``.

The tree is staged at a FIXED path under the scratch folder (``STAGE_NAME``) and backed up
as ``.`` with a fixed host, so the snapshot's root is the data dir itself (a plain ``restic
restore`` gives the data dir back) and restic finds its parent snapshot. One create at a time
per scratch folder (``exclusive``).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from hermes_runtime.backup.dbsnap import check_and_hash, snapshot_database
from hermes_runtime.backup.manifest import (
    QUICK_CHECK,
    DatabaseRecord,
    TreeManifest,
    write_manifest,
)
from hermes_runtime.backup.selection import FoundFile, Selection
from hermes_runtime.common.errors import RuntimeFailure
from hermes_runtime.common.flock import try_flock
from hermes_runtime.common.logs import Reporter

STAGE_NAME = "hermes-restic-stage"


@contextlib.contextmanager
def exclusive(stage: Path) -> Iterator[None]:
    """One backup at a time per scratch folder: the stage path is fixed (restic's parent)."""
    stage.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(stage.parent, os.O_RDONLY | os.O_DIRECTORY)  # a lock that leaves no file
    try:
        if not try_flock(fd):
            raise RuntimeFailure(
                f"another backup is staging in {stage}: wait for it or pass another --work-dir"
            )
        yield
    finally:
        os.close(fd)


@contextlib.contextmanager
def empty_stage(stage: Path) -> Iterator[Path]:
    """``stage`` created empty (mode 0700), and removed again whatever happens."""
    shutil.rmtree(stage, ignore_errors=True)
    stage.mkdir(mode=0o700, parents=True)
    try:
        yield stage
    finally:
        shutil.rmtree(stage, ignore_errors=True)


@dataclass(frozen=True)
class StagedDatabase:
    """A database's record for the manifest, and the seconds each step took (for the log)."""

    record: DatabaseRecord
    seconds: dict[str, float]


def stage_tree(
    data_dir: Path,
    stage: Path,
    selection: Selection,
    manifest: TreeManifest,
    db_attempts: int,
    progress: Reporter,
) -> None:
    """Fill ``stage`` with ``selection`` of ``data_dir`` and ``manifest`` (completed here)."""
    for directory in selection.dirs:
        (stage / directory.relpath).mkdir(parents=True, exist_ok=True)
    for found in selection.databases:
        staged = stage_database(data_dir, stage, found, db_attempts)
        manifest.databases[found.relpath] = staged.record
        progress.step("database", path=found.relpath, **staged.seconds)
    for found in selection.files:
        dest = stage / found.relpath
        dest.parent.mkdir(parents=True, exist_ok=True)
        try:
            shutil.copy2(data_dir / found.relpath, dest, follow_symlinks=False)
        except FileNotFoundError:
            continue  # deleted since the scan
        manifest.files += 1
    for link in selection.links:
        dest = stage / link.relpath
        dest.parent.mkdir(parents=True, exist_ok=True)
        os.symlink(link.target, dest)
    for directory in sorted(selection.dirs, key=lambda d: d.relpath.count("/"), reverse=True):
        os.chmod(stage / directory.relpath, directory.mode)
    write_manifest(stage, manifest)


def stage_database(data_dir: Path, stage: Path, found: FoundFile, attempts: int) -> StagedDatabase:
    """Snapshot one database into ``stage`` at its own path, quick_check it, hash it.

    A copy that fails the check stops the backup before restic runs: nothing is stored.
    """
    source = data_dir / found.relpath
    copy = stage / found.relpath
    copy.parent.mkdir(parents=True, exist_ok=True)
    seconds = snapshot_database(source, copy, attempts=attempts)
    ended = datetime.now(UTC).isoformat()  # no commit after this is in the copy
    checking = time.monotonic()
    check, digest = check_and_hash(copy)
    check_seconds = time.monotonic() - checking
    for suffix in ("-wal", "-shm"):  # what reading the copy may have left beside it
        copy.with_name(copy.name + suffix).unlink(missing_ok=True)
    if not check.ok:
        raise RuntimeFailure(f"database {source}: snapshot fails {QUICK_CHECK}: {check.integrity}")
    os.chmod(copy, found.mode)
    record = DatabaseRecord(
        checked=QUICK_CHECK,
        tables=check.tables,
        sha256=digest,
        size=copy.stat().st_size,
        snapshot_at=ended,
        snapshot_seconds=round(seconds, 4),
    )
    return StagedDatabase(
        record, {"seconds": round(seconds, 3), "check_seconds": round(check_seconds, 3)}
    )
