"""The tree ``create`` hands restic: database snapshots, checked, beside copies of the rest.

Our part, which restic cannot do: take a one-step online snapshot of every SQLite database,
run ``PRAGMA quick_check`` on the copy (every b-tree; the virtual tables' own checks, FTS5's
re-tokenising of every row, are left to ``verify``), count its rows, hash it. The other
files are copied with their modes and mtimes, symlinks and empty folders recreated, and our
manifest written at ``.hermes-backup/manifest.json``. The data dir is the agent's, read as
hostile input: through descriptors, no link followed (``safe_tree``, ``dbsource``).

The tree is staged at a FIXED path under the scratch folder (``STAGE_NAME``) and backed up
as ``.`` with a fixed host, so the snapshot's root is the data dir itself (a plain ``restic
restore`` gives the data dir back) and restic finds its parent snapshot. One create at a time
per scratch folder (``exclusive``).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from hermes_runtime.backup.dbsnap import check_and_hash, snapshot_database
from hermes_runtime.backup.dbsource import HeldDatabase
from hermes_runtime.backup.manifest import (
    QUICK_CHECK,
    DatabaseRecord,
    TreeManifest,
    database_places,
    read_manifest,
    write_manifest,
)
from hermes_runtime.backup.safe_tree import DIR_FLAGS, Refused, copy_file, open_beneath, open_root
from hermes_runtime.backup.selection import FoundFile, Selection
from hermes_runtime.common.errors import RuntimeFailure
from hermes_runtime.common.flock import try_flock
from hermes_runtime.common.logs import Reporter, log_event

STAGE_NAME = "hermes-restic-stage"
STAGED = "(being staged)"  # how restore's checks name the tree in their messages
STAGED_FILE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


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
    between_scan_and_copy: Callable[[], None] | None = None,
) -> None:
    """Fill ``stage`` with ``selection`` of ``data_dir`` and ``manifest`` (completed here).

    ``data_dir`` is hostile input (``safe_tree``, ``dbsource``): it must be the folder scanned,
    and a name that became a link, socket, FIFO or device on the way since the scan is left out
    with a logged line; nothing is read through a link. The staged tree is then checked by
    restore's own rules (``_check_restorable``): ``create`` never stores what ``restore``
    refuses. ``between_scan_and_copy`` runs first, before the tree is read again (a test's
    way to change the tree at that point without a race).
    """
    if between_scan_and_copy is not None:
        between_scan_and_copy()
    with _scanned_root(data_dir, selection) as root_fd:
        for directory in selection.dirs:
            (stage / directory.relpath).mkdir(parents=True, exist_ok=True)
        for found in selection.databases:
            staged = stage_database(root_fd, data_dir, stage, found, db_attempts)
            if staged is None:
                selection.skipped_special.append(found.relpath)
                continue
            manifest.databases[found.relpath] = staged.record
            progress.step("database", path=found.relpath, **staged.seconds)
        for found in selection.files:
            manifest.files += _stage_file(root_fd, stage, found, selection.skipped_special)
    for link in selection.links:  # last: nothing of ours is written below a staged link
        os.symlink(link.target, stage / link.relpath)
    for directory in sorted(selection.dirs, key=lambda d: d.relpath.count("/"), reverse=True):
        os.chmod(stage / directory.relpath, directory.mode)
    write_manifest(stage, manifest)
    _check_restorable(data_dir, stage)


@contextlib.contextmanager
def _scanned_root(data_dir: Path, selection: Selection) -> Iterator[int]:
    """A descriptor of ``data_dir``, which must still be the folder the scan read."""
    root_fd = open_root(data_dir)
    try:
        root = os.fstat(root_fd)
        if (root.st_dev, root.st_ino) != selection.root:
            raise RuntimeFailure(f"--data-dir {data_dir} was replaced since the scan")
        yield root_fd
    finally:
        os.close(root_fd)


def _stage_file(root_fd: int, stage: Path, found: FoundFile, skipped: list[str]) -> int:
    """Copy one file into ``stage`` with its mode and times: 1 if copied, 0 if left out.

    A file refused is logged and added to ``skipped``. The times are the ones ``fstat`` gave
    before the copy: a file written while copied gets an older mtime than its source has now,
    so the next backup reads it again.
    """
    dest_path = stage / found.relpath
    dest = os.open(dest_path, STAGED_FILE_FLAGS, 0o600)
    try:
        copied = copy_file(root_fd, found.relpath, dest)
        os.fchmod(dest, stat.S_IMODE(copied.before.st_mode))
        os.utime(dest, ns=(copied.before.st_atime_ns, copied.before.st_mtime_ns))
    except (Refused, FileNotFoundError) as exc:
        dest_path.unlink()
        if isinstance(exc, Refused):  # a file gone since the scan is simply not in this backup
            log_event("backup.create.skipped", path=found.relpath, reason=exc.reason)
            skipped.append(found.relpath)
        return 0
    finally:
        os.close(dest)
    if (copied.before.st_dev, copied.before.st_ino) != (found.device, found.inode):
        log_event("backup.create.changed", path=found.relpath, reason="replaced since the scan")
    elif copied.changed:
        log_event("backup.create.changed", path=found.relpath, reason="written while copied")
    return 1


def _check_restorable(data_dir: Path, stage: Path) -> None:
    """Fail unless ``restore``'s checks of names (``manifest``, ``untrusted``) pass on ``stage``."""
    try:
        database_places(stage, read_manifest(stage, STAGED), STAGED)
    except RuntimeFailure as exc:
        raise RuntimeFailure(
            f"backup of {data_dir} would not restore, nothing was stored: {exc}"
        ) from exc


def stage_database(
    root_fd: int, data_dir: Path, stage: Path, found: FoundFile, attempts: int
) -> StagedDatabase | None:
    """Snapshot one database into ``stage`` at its own path, quick_check it, hash it.

    The database is read through its folder, opened beneath ``root_fd`` (``dbsource``); one
    whose folder became a link, or which is gone or no longer a regular file, is left out
    (None) with a logged line. A copy that fails the check stops the backup before restic
    runs: nothing is stored.
    """
    source = data_dir / found.relpath
    copy = stage / found.relpath
    parent, _, name = found.relpath.rpartition("/")
    try:
        dir_fd = open_beneath(root_fd, parent, DIR_FLAGS) if parent else os.dup(root_fd)
        try:
            held = HeldDatabase(dir_fd, name, str(source))
            seconds = snapshot_database(held, copy, attempts=attempts)
        finally:
            os.close(dir_fd)
    except (Refused, FileNotFoundError) as exc:
        copy.unlink(missing_ok=True)
        reason = exc.reason if isinstance(exc, Refused) else "gone since the scan"
        log_event("backup.create.skipped", path=found.relpath, reason=reason)
        return None
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
