"""``backup list``: our snapshots in the repository, and how one is named.

Every snapshot ``create`` makes carries the tag ``hermes-runtime`` and its agent's name as
restic's host (``agents``: pods change names, agents do not, and ``forget`` groups by host),
plus tags that let a listing say what it holds without reading it: the number of databases,
of files, and the create's random backup id (also in the manifest: it ties a restored tree
to its listing). A listing is the repository's agent's snapshots; the other agents sharing
the repository are counted (``Listing.others``), never acted on.
"""

from __future__ import annotations

import re
from collections import Counter
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


@dataclass(frozen=True)
class Listing:
    """Every snapshot of ours in a repository (oldest first), seen as ``agent``'s."""

    agent: str
    entries: list[Listed]

    @property
    def own(self) -> list[Listed]:
        return [entry for entry in self.entries if entry.info.agent == self.agent]

    @property
    def others(self) -> dict[str, int]:
        """How many snapshots each other agent sharing the repository has."""
        counts = Counter(e.info.agent for e in self.entries if e.info.agent != self.agent)
        return dict(sorted(counts.items()))


def list_snapshots(repo: ResticRepository) -> list[SnapshotInfo]:
    """The agent's snapshots in the repository, oldest first; none when it does not exist yet.

    Without restic's lock (``--no-lock``): a listing changes nothing, and the runbook's shell
    pod mounts the backup volume read-only, where restic would retry writing its lock for
    minutes. A prune running at the same time may still list a snapshot it is removing.
    """
    return [listed.info for listed in repository_listing(repo).own]


def repository_listing(repo: ResticRepository) -> Listing:
    """Every snapshot of ours in the repository (one restic run), as the repository's agent's."""
    require_folder(repo)
    args = [NO_LOCK, "snapshots", "--json", "--tag", TAG]
    done = run_restic(repo, args, check=False)
    if done.returncode != 0:
        if repository_missing(done):
            return Listing(repo.agent, [])
        raise_failed(repo.url, args, done)
    listed: list[Listed] = []
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
            agent=str(snap.get("hostname") or ""),
        )
        ids = [t.removeprefix(BACKUP_ID_TAG) for t in tags if t.startswith(BACKUP_ID_TAG)]
        listed.append(Listed(info, ids[0] if ids else ""))
    return Listing(repo.agent, listed)


def _tag_count(tags: list[str], prefix: str, default: int) -> int:
    for tag in tags:
        if tag.startswith(prefix) and tag.removeprefix(prefix).isdigit():
            return int(tag.removeprefix(prefix))
    return default


def find_snapshot(
    repo: ResticRepository, snapshot: str, listing: Listing | None = None
) -> SnapshotInfo:
    """``latest`` or an id (or its unique prefix) among the agent's snapshots.

    ``listing``: the repository's, when the caller listed it already. Another agent's
    snapshot is refused, naming that agent: acting on it takes ``--agent`` with its name.
    """
    listing = repository_listing(repo) if listing is None else listing
    infos = [listed.info for listed in listing.own]
    if not infos:
        raise RuntimeFailure(
            f"backup repository {repo.url} holds no snapshot of agent {repo.agent} "
            f"(asked for {snapshot}){_others_hint(listing.others)}"
        )
    if snapshot == "latest":
        return infos[-1]
    matches = [i for i in infos if i.id.startswith(snapshot)]
    if len(matches) != 1:
        raise RuntimeFailure(
            f"backup repository {repo.url}: no single snapshot {snapshot!r} of agent "
            f"{repo.agent}{_others_hint(listing.others)}"
        )
    return matches[0]


def _others_hint(others: dict[str, int]) -> str:
    """Where another agent's snapshots are, so the operator can name that agent."""
    if not others:
        return ""
    counts = ", ".join(f"{agent} ({count})" for agent, count in others.items())
    return f"; it holds snapshots of other agents: {counts} (pass --agent NAME to act on one)"


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
