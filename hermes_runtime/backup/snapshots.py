"""``backup list``: our snapshots in the repository, and how one is named.

Every snapshot ``create`` makes carries the tag ``hermes-runtime`` and the fixed host
``hermes-runtime`` (pods change names, and ``forget`` groups by host), plus tags that let a
listing say what it holds without reading it: the number of databases, of files, and the
create's random backup id (also in the manifest: it ties a restored tree to its listing).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from hermes_runtime.backup.reports import SnapshotInfo
from hermes_runtime.backup.restic import (
    NO_LOCK,
    ResticRepository,
    json_document,
    require_folder,
    run_restic,
)
from hermes_runtime.backup.restic_errors import raise_failed, repository_missing
from hermes_runtime.common.errors import RuntimeFailure

TAG = "hermes-runtime"
HOST = "hermes-runtime"  # fixed: pods change names, and forget groups by host
DATABASES_TAG = "hermes-databases="
FILES_TAG = "hermes-files="  # the data dir's files and databases
BACKUP_ID_TAG = "hermes-backup-id="
LABEL_TAG = "hermes-label:"  # hermes-label:KEY=VALUE, from `create --label`
LABEL = re.compile(r"^[a-z0-9][a-z0-9.-]{0,62}$")


@dataclass(frozen=True)
class Listed:
    """One snapshot of a listing, with the create's backup id from its tags ("" if none)."""

    info: SnapshotInfo
    backup_id: str


def list_snapshots(repo: ResticRepository) -> list[SnapshotInfo]:
    """Our snapshots in the repository, oldest first; none when it does not exist yet.

    Without restic's lock (``--no-lock``): a listing changes nothing, and the runbook's shell
    pod mounts the backup volume read-only, where restic would retry writing its lock for
    minutes. A prune running at the same time may still list a snapshot it is removing.
    """
    return [listed.info for listed in listed_snapshots(repo)]


def listed_snapshots(repo: ResticRepository) -> list[Listed]:
    """``list_snapshots`` with each snapshot's backup id."""
    require_folder(repo)
    args = [NO_LOCK, "snapshots", "--json", "--tag", TAG]
    done = run_restic(repo, args, check=False)
    if done.returncode != 0:
        if repository_missing(done):
            return []
        raise_failed(repo.url, args, done)
    listed = []
    for snap in json_document(done.stdout) or []:
        summary = snap.get("summary") or {}
        tags = snap.get("tags") or []
        info = SnapshotInfo(
            id=snap["id"],
            created_at=snap["time"],
            files=_tag_count(tags, FILES_TAG, int(summary.get("total_files_processed", 0))),
            databases=_tag_count(tags, DATABASES_TAG, 0),
            bytes=int(summary.get("total_bytes_processed", 0)),
            status="ok",
            labels=_labels(tags),
        )
        ids = [t.removeprefix(BACKUP_ID_TAG) for t in tags if t.startswith(BACKUP_ID_TAG)]
        listed.append(Listed(info, ids[0] if ids else ""))
    return listed


def _tag_count(tags: list[str], prefix: str, default: int) -> int:
    for tag in tags:
        if tag.startswith(prefix) and tag.removeprefix(prefix).isdigit():
            return int(tag.removeprefix(prefix))
    return default


def find_snapshot(
    repo: ResticRepository, snapshot: str, infos: list[SnapshotInfo] | None = None
) -> SnapshotInfo:
    """``latest`` or an id (or its unique prefix) among our snapshots (``infos``, else listed)."""
    infos = list_snapshots(repo) if infos is None else infos
    if not infos:
        raise RuntimeFailure(
            f"backup repository {repo.url} holds no snapshot (asked for {snapshot})"
        )
    if snapshot == "latest":
        return infos[-1]
    matches = [i for i in infos if i.id.startswith(snapshot)]
    if len(matches) != 1:
        raise RuntimeFailure(f"backup repository {repo.url}: no single snapshot {snapshot!r}")
    return matches[0]


def _labels(tags: list[str]) -> dict[str, str]:
    pairs = (t.removeprefix(LABEL_TAG).partition("=") for t in tags if t.startswith(LABEL_TAG))
    return {key: value for key, _, value in pairs}


def label_tag(key: str, value: str) -> str:
    """The restic tag carrying one label; a bad key or value is refused, naming it."""
    if not LABEL.match(key):
        raise RuntimeFailure(
            f"--label {key}={value}: the key must be lower-case letters, digits, '.' and '-'"
        )
    if "," in value or len(value) > 200 or not value.isprintable():
        raise RuntimeFailure(
            f"--label {key}={value!r}: the value must be printable, without ',', "
            "at most 200 characters"
        )
    return f"{LABEL_TAG}{key}={value}"
