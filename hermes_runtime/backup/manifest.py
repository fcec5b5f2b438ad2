"""Our manifest inside each snapshot: what restic cannot know about the tree it stores.

``.hermes-backup/manifest.json`` at the snapshot's root says which files are SQLite databases,
how ``create`` checked each copy, its row counts, its SHA-256 (so a restore can show it holds
exactly the checked copy without checking again) and when its online snapshot ended (for the
choice against a Litestream replica). Each database is in the tree as the plain file it is,
at its own path: ``restic restore`` alone gives the data dir back.

A manifest comes from the target, and whoever holds the repository password can write one:
``read_manifest`` accepts only this format, with every field of every record of the right
type, and ``database_places`` checks each key before it is joined onto a folder.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from hermes_runtime.backup.untrusted import inside
from hermes_runtime.common.errors import RuntimeFailure

MANIFEST_DIR = ".hermes-backup"
MANIFEST_FILE = "manifest.json"
MANIFEST_RELPATH = f"{MANIFEST_DIR}/{MANIFEST_FILE}"
# 3: each database one plain file, checked with quick_check. Formats 1 and 2 were never
# released and are refused.
MANIFEST_FORMAT = 3
QUICK_CHECK = "quick_check"  # what create runs on each copy (docs/backup.md, "Checks")


@dataclass(frozen=True)
class DatabaseRecord:
    """One database of the snapshot: how its copy was checked, what it held, when it ended."""

    checked: str  # QUICK_CHECK: every b-tree; the virtual tables' own checks are verify's
    tables: dict[str, int]  # rows per ordinary table
    sha256: str  # of the checked copy, as stored in the snapshot
    size: int
    snapshot_at: str  # ISO 8601: no commit after this is in the copy
    snapshot_seconds: float


@dataclass
class TreeManifest:
    """What restic cannot know: which files are databases, their checks and row counts."""

    created_at: str
    source: dict[str, str]
    excludes: list[str]
    backup_id: str  # random, also a tag of the restic snapshot: ties a tree to its listing
    databases: dict[str, DatabaseRecord] = field(default_factory=dict)
    files: int = 0  # the data dir's files that are not databases
    format: int = MANIFEST_FORMAT


def write_manifest(root: Path, manifest: TreeManifest) -> None:
    """Write ``manifest`` into the staged tree at ``root``, in a folder made here and now.

    Why: the staged tree holds links copied from the data dir, which the agent writes. The
    folder is created beneath ``root``'s descriptor and the file with ``O_EXCL | O_NOFOLLOW``:
    anything already bearing either name fails the backup instead of being written through.
    """
    body = json.dumps(asdict(manifest), indent=2, sort_keys=True).encode()
    root_fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        os.mkdir(MANIFEST_DIR, dir_fd=root_fd)
        folder = os.open(MANIFEST_DIR, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=root_fd)
    finally:
        os.close(root_fd)
    try:
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        fd = os.open(MANIFEST_FILE, flags, 0o644, dir_fd=folder)
    finally:
        os.close(folder)
    with open(fd, "wb") as file:
        file.write(body)


def read_manifest(root: Path, snapshot_id: str) -> TreeManifest:
    """The manifest of the tree restored at ``root``; refused unless it is this format, whole."""
    where = f"snapshot {snapshot_id}: {MANIFEST_RELPATH}"
    path = inside(root, MANIFEST_RELPATH, f"snapshot {snapshot_id}")  # a symlinked folder
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise RuntimeFailure(f"{where}: not readable ({exc})") from exc
    if not isinstance(raw, dict):
        raise RuntimeFailure(f"{where}: not a JSON object")
    if raw.get("format") != MANIFEST_FORMAT:
        raise RuntimeFailure(
            f"{where} is format {raw.get('format')!r}; this hermes-runtime reads format "
            f"{MANIFEST_FORMAT} only (earlier formats were never released: take a new backup)"
        )
    databases = raw.get("databases")
    if not isinstance(databases, dict):
        raise RuntimeFailure(f"{where} has no map of databases to records")
    records = {key: _record(where, key, value) for key, value in databases.items()}
    try:
        manifest = TreeManifest(**{**raw, "databases": records})
    except TypeError as exc:
        raise RuntimeFailure(f"{where}: {exc}") from exc
    for name, kind in (("created_at", str), ("backup_id", str), ("files", int)):
        if not isinstance(getattr(manifest, name), kind):
            raise RuntimeFailure(f"{where}: {name} is not a {kind.__name__}")
    return manifest


RECORD_TYPES: dict[str, Any] = {
    "checked": str,
    "tables": dict,
    "sha256": str,
    "size": int,
    "snapshot_at": str,
    "snapshot_seconds": (int, float),
}


def _record(where: str, key: object, value: object) -> DatabaseRecord:
    """One database record, every field present and of its type; else fail naming it."""
    if not isinstance(key, str) or not isinstance(value, dict):
        raise RuntimeFailure(f"{where}: database {key!r} has no record")
    missing = [
        f.name
        for f in fields(DatabaseRecord)
        if not isinstance(value.get(f.name), RECORD_TYPES[f.name])
    ]
    if missing:
        raise RuntimeFailure(f"{where}: database {key!r} lacks {', '.join(missing)}")
    tables = value["tables"]
    if not all(isinstance(k, str) and isinstance(v, int) for k, v in tables.items()):
        raise RuntimeFailure(f"{where}: database {key!r}: tables is not a map of names to rows")
    return DatabaseRecord(**{f.name: value[f.name] for f in fields(DatabaseRecord)})


def database_places(root: Path, manifest: TreeManifest, snapshot_id: str) -> dict[str, Path]:
    """Where each database of the manifest is under ``root``: each key checked to stay inside.

    The manifest is the snapshot's own file: whoever holds the repository password writes it.
    """
    source = f"manifest {MANIFEST_RELPATH} of snapshot {snapshot_id} (a database key)"
    return {key: inside(root, key, source) for key in manifest.databases}
