"""``backup restore``: rebuild the data dir from a snapshot, all or nothing.

The data dir ``D`` is a PVC mount point in the pod, so it can never be
renamed. Restore therefore stages the whole snapshot in a hidden folder on
the SAME filesystem as ``D`` (beside ``D`` when its parent shares the
filesystem, otherwise inside ``D``), verifies every sha256 and every
database, and only then swaps entries into ``D`` one rename at a time. A
failure while staging (disk full, a corrupt blob, an unreachable target)
removes the staging folder and leaves ``D`` exactly as it was; a failure
during the swap moves every entry back.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from hermes_runtime.backup.blobs import restore_blob
from hermes_runtime.backup.catalog import load_manifest, resolve_snapshot
from hermes_runtime.backup.dbsnap import check_database
from hermes_runtime.backup.manifest import Manifest
from hermes_runtime.backup.selection import STAGING_PREFIX
from hermes_runtime.backup.target import Target
from hermes_runtime.common.atomic import fsync_dir
from hermes_runtime.common.errors import RuntimeFailure, name_list
from hermes_runtime.common.logs import Reporter, reporter

IGNORED_IN_DATA_DIR = ("lost+found",)


@dataclass
class RestoreReport:
    snapshot: str | None
    data_dir: str
    restored: bool
    reason: str
    files: int = 0
    databases: int = 0
    bytes: int = 0
    duration_seconds: float = 0.0


def data_dir_entries(data_dir: Path) -> list[str]:
    """Entries that count as data: everything but ``lost+found`` and restore scratch space."""
    if not data_dir.exists():
        return []
    return sorted(
        name
        for name in os.listdir(data_dir)
        if name not in IGNORED_IN_DATA_DIR and not name.startswith(STAGING_PREFIX)
    )


def data_dir_has_data(data_dir: Path) -> bool:
    """What ``--if-empty`` checks: anything but ``lost+found`` and restore scratch space."""
    return bool(data_dir_entries(data_dir))


def restore_snapshot(
    target: Target,
    data_dir: Path,
    *,
    snapshot: str = "latest",
    force: bool = False,
    if_empty: bool = False,
    stream: TextIO | None = None,
) -> RestoreReport:
    """Restore ``snapshot`` into ``data_dir``; see the module docstring for the guarantees."""
    started = time.monotonic()
    existing = data_dir_entries(data_dir)
    if existing and if_empty:
        return RestoreReport(None, str(data_dir), False, "data dir already holds data")
    if existing and not force:
        raise RuntimeFailure(
            f"--data-dir {data_dir} is not empty ({name_list(existing)}); "
            "pass --force to replace its content, or --if-empty to skip"
        )
    snapshot_id = resolve_snapshot(target, snapshot)
    manifest = load_manifest(target, snapshot_id)
    created_data_dir = not data_dir.exists()
    data_dir.mkdir(parents=True, exist_ok=True)
    stage_root = _staging_root(data_dir)
    tag = f"{STAGING_PREFIX}{data_dir.name}-{secrets.token_hex(4)}"
    stage = stage_root / f"{tag}-stage"
    _remove_stale_stages(stage_root, data_dir.name)
    with reporter("backup.restore", stream) as progress:
        progress.step("started", snapshot=snapshot_id, data_dir=str(data_dir), staging=str(stage))
        progress.start_task(f"restore {snapshot_id}", total=manifest.total_bytes)
        try:
            stage.mkdir(mode=0o700)
            _materialize(target, manifest, stage, progress)
        except (OSError, RuntimeFailure) as exc:
            shutil.rmtree(stage, ignore_errors=True)
            if created_data_dir:
                with contextlib.suppress(OSError):
                    data_dir.rmdir()
            raise RuntimeFailure(
                f"restore of snapshot {snapshot_id} into {data_dir} failed while staging in "
                f"{stage}: {exc}; {data_dir} is unchanged"
            ) from exc
        _swap_in(stage, data_dir, stage_root / f"{tag}-old", existing)
        _apply_top_modes(manifest, data_dir)
        progress.step("finished", snapshot=snapshot_id, data_dir=str(data_dir))
    return RestoreReport(
        snapshot_id,
        str(data_dir),
        True,
        "restored",
        files=len(manifest.files),
        databases=len(manifest.databases),
        bytes=manifest.total_bytes,
        duration_seconds=round(time.monotonic() - started, 3),
    )


def _staging_root(data_dir: Path) -> Path:
    """Beside ``D`` when a rename from there is possible, else inside ``D`` (a mount point)."""
    parent = data_dir.resolve().parent
    same_fs = parent.stat().st_dev == data_dir.stat().st_dev
    if same_fs and os.access(parent, os.W_OK | os.X_OK) and not os.path.ismount(data_dir):
        return parent
    return data_dir


def _remove_stale_stages(stage_root: Path, name: str) -> None:
    """Staging folders of a restore that crashed before its swap hold nothing of value.

    ``-old`` folders are kept: after a crash in the middle of a swap they hold
    the previous data (see the runbook in docs/backup.md).
    """
    prefix = f"{STAGING_PREFIX}{name}-"
    for entry in stage_root.iterdir():
        if entry.name.startswith(prefix) and entry.name.endswith("-stage"):
            shutil.rmtree(entry, ignore_errors=True)


def _materialize(target: Target, manifest: Manifest, stage: Path, progress: Reporter) -> None:
    for directory in manifest.dirs:
        (stage / directory.path).mkdir(mode=0o700, parents=True, exist_ok=True)
    for record in manifest.files:
        dest = stage / record.path
        dest.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        restore_blob(target, record.sha256, dest, record.mode)
        os.chmod(dest, record.mode)
        os.utime(dest, ns=(record.mtime_ns, record.mtime_ns))
        progress.advance(record.size)
    for db in manifest.databases:
        dest = stage / db.path
        dest.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        restore_blob(target, db.sha256, dest, db.mode)
        check = check_database(dest)
        _remove_sqlite_sidecars(dest)
        if not check.ok or check.tables != db.tables:
            raise RuntimeFailure(
                f"database {db.path} of snapshot {manifest.id} does not check out after download: "
                f"integrity {check.integrity}, tables {check.tables} != {db.tables}"
            )
        os.chmod(dest, db.mode)
        progress.advance(db.size)
    for link in manifest.links:
        dest = stage / link.path
        dest.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        os.symlink(link.target, dest)
    for directory in sorted(manifest.dirs, key=lambda d: d.path.count("/"), reverse=True):
        if "/" in directory.path:  # top-level folders: after the swap (see _apply_top_modes)
            os.chmod(stage / directory.path, directory.mode)


def _apply_top_modes(manifest: Manifest, data_dir: Path) -> None:
    """Modes of top-level folders, set once they are in place.

    Moving a folder to another parent rewrites its ``..`` entry, which needs
    write permission on the folder itself: a restored ``0o555`` folder could
    not be swapped in by a non-root restore if its mode were set earlier.
    """
    for directory in manifest.dirs:
        if "/" not in directory.path:
            os.chmod(data_dir / directory.path, directory.mode)


def _remove_sqlite_sidecars(db: Path) -> None:
    for suffix in ("-wal", "-shm"):
        with contextlib.suppress(FileNotFoundError):
            db.with_name(db.name + suffix).unlink()


def _swap_in(stage: Path, data_dir: Path, old: Path, existing: list[str]) -> None:
    """Move old entries aside and staged ones in, by renames; undo everything on error."""
    moved_out: list[str] = []
    moved_in: list[str] = []
    try:
        if existing:
            old.mkdir(mode=0o700)
            for name in existing:
                os.rename(data_dir / name, old / name)
                moved_out.append(name)
        for name in sorted(os.listdir(stage)):
            os.rename(stage / name, data_dir / name)
            moved_in.append(name)
        fsync_dir(data_dir)
    except OSError as exc:
        for name in reversed(moved_in):
            os.rename(data_dir / name, stage / name)
        for name in reversed(moved_out):
            os.rename(old / name, data_dir / name)
        shutil.rmtree(stage, ignore_errors=True)
        with contextlib.suppress(OSError):
            old.rmdir()
        raise RuntimeFailure(
            f"restore into {data_dir} failed while swapping in: {exc}; rolled back"
        ) from exc
    shutil.rmtree(old, ignore_errors=True)
    shutil.rmtree(stage, ignore_errors=True)
