"""A snapshot's tree restored into a folder, each database shown to be the copy ``create`` checked.

Shared by ``restore`` (into its staging folder) and ``verify`` (into scratch): one
``restic restore`` of the whole tree, then for each database of the manifest, its SHA-256
against the one recorded. The same bytes passed ``create``'s ``quick_check`` and gave the
recorded row counts; ``verify`` also runs the full ``integrity_check`` (the virtual tables'
own checks included) and compares the row counts. Every database key of the manifest is
checked before its file is read (``manifest.database_places``).
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

from hermes_runtime.backup.dbsnap import check_database, file_sha256
from hermes_runtime.backup.manifest import (
    MANIFEST_DIR,
    DatabaseRecord,
    TreeManifest,
    database_places,
    read_manifest,
)
from hermes_runtime.backup.reports import SnapshotInfo
from hermes_runtime.backup.restic import ResticRepository, run_restic
from hermes_runtime.backup.snapshots import TAG
from hermes_runtime.common.errors import RuntimeFailure

SHA256 = "sha256"
FULL_CHECK = "sha256+integrity_check"


@dataclass(frozen=True)
class LatestTagged:
    """The agent's newest snapshot as restic resolves it when it runs (``latest --tag --host``).

    Not tied to any listing: a backup may land between a listing and this run, so whoever
    restores it compares the manifest's backup id with the listing's (``restore``).
    """

    agent: str

    def restic_args(self) -> list[str]:
        return ["latest", "--tag", TAG, "--host", self.agent]


@dataclass(frozen=True)
class RestoredTree:
    """The manifest of a restored tree, and how each database was shown sound."""

    manifest: TreeManifest
    checked: dict[str, str]  # per database: SHA256, or FULL_CHECK


def restore_tree(
    repo: ResticRepository,
    snapshot: SnapshotInfo | LatestTagged,
    dest: Path,
    extra: list[str],
    *,
    integrity_check: bool = False,
) -> RestoredTree:
    """The snapshot's tree in ``dest`` (restic's ``extra`` options first), databases checked.

    The manifest's folder is removed once read: it is ours, not the data dir's.
    """
    args = snapshot.restic_args() if isinstance(snapshot, LatestTagged) else [snapshot.id]
    name = "latest" if isinstance(snapshot, LatestTagged) else snapshot.id
    run_restic(repo, [*extra, "restore", *args, "--target", str(dest)])
    manifest = read_manifest(dest, name)
    places = database_places(dest, manifest, name)  # every key, before any file is read
    checked = {
        path: check_restored(places[path], path, record, name, integrity_check)
        for path, record in manifest.databases.items()
    }
    shutil.rmtree(dest / MANIFEST_DIR)
    return RestoredTree(manifest, checked)


def check_restored(
    place: Path, path: str, record: DatabaseRecord, snapshot: str, integrity_check: bool
) -> str:
    """Fail unless the restored database at ``place`` is the one recorded; say how it was shown."""
    if not place.is_file() or place.is_symlink():
        raise RuntimeFailure(
            f"database {path} of snapshot {snapshot}: the manifest lists it, the tree has no "
            "such file"
        )
    digest = file_sha256(place)
    if digest != record.sha256:
        raise RuntimeFailure(
            f"database {path} of snapshot {snapshot} does not check out: its SHA-256 "
            f"{digest} is not the {record.sha256} recorded when it was checked"
        )
    if not integrity_check:
        return SHA256
    check = check_database(place)
    for suffix in ("-wal", "-shm"):
        place.with_name(place.name + suffix).unlink(missing_ok=True)
    if not check.ok or check.tables != record.tables:
        raise RuntimeFailure(
            f"database {path} of snapshot {snapshot} does not check out: "
            f"integrity {check.integrity}, tables {check.tables} != {record.tables}"
        )
    return FULL_CHECK
