"""The all-or-nothing swap of a restore: stage beside the data dir, then rename entries in.

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
import shutil
from pathlib import Path

from hermes_runtime.backup.selection import STAGING_PREFIX
from hermes_runtime.common.atomic import fsync_dir, sync_filesystem
from hermes_runtime.common.errors import RuntimeFailure

IGNORED_IN_DATA_DIR = ("lost+found",)


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


def staging_root(data_dir: Path) -> Path:
    """Beside ``D`` when a rename from there is possible, else inside ``D`` (a mount point)."""
    parent = data_dir.resolve().parent
    same_fs = parent.stat().st_dev == data_dir.stat().st_dev
    if same_fs and os.access(parent, os.W_OK | os.X_OK) and not os.path.ismount(data_dir):
        return parent
    return data_dir


def remove_stale_stages(stage_root: Path, name: str) -> None:
    """Staging folders of a restore that crashed before its swap hold nothing of value.

    ``-old`` folders are kept: after a crash in the middle of a swap they hold
    the previous data (see the runbook in docs/backup.md).
    """
    prefix = f"{STAGING_PREFIX}{name}-"
    for entry in stage_root.iterdir():
        if entry.name.startswith(prefix) and entry.name.endswith("-stage"):
            shutil.rmtree(entry, ignore_errors=True)


def swap_in(stage: Path, data_dir: Path, old: Path, existing: list[str]) -> None:
    """Move old entries aside and staged ones in, by renames; undo everything on error.

    The staged tree reaches the disk first (``sync_filesystem``): the renames are made
    durable, so what they point at must be too.
    """
    moved_out: list[str] = []
    moved_in: list[str] = []
    try:
        sync_filesystem(stage)
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
