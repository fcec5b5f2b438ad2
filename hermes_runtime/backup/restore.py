"""``backup restore``: a snapshot (and, when asked, newer Litestream replicas) into the data dir.

All or nothing: the tree is staged beside the data dir (``swap``), every database shown to be
the copy ``create`` checked (``snapshot_tree``), the newer replicas restored over it and
checked (``replica_order``), then swapped in by renames. Any failure before the swap leaves
the data dir unchanged.

Without restic's lock (``--no-lock``): a restore only reads the repository, and the runbook
mounts the backup volume read-only, where restic would retry its lock for minutes. A prune
running at the same time can only make the staging fail.

What a restore writes is the agent's to write afterwards, and the agent is another UID: the
restore runs under the shared umask and, before the swap, gives the group read and write on
every file and folder of the staged tree (restic applies the snapshot's modes), never
through a link (``common/groupaccess.py``).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict
from datetime import datetime
from pathlib import Path

from hermes_runtime.backup.manifest import MANIFEST_DIR, TreeManifest
from hermes_runtime.backup.replica_order import (
    ReplicaChoice,
    ResticCopies,
    list_replicas,
    newer_replicas,
    restore_replicas,
)
from hermes_runtime.backup.replicas.base import Replicas
from hermes_runtime.backup.reports import RestoreReport, SnapshotInfo
from hermes_runtime.backup.restic import NO_LOCK, ResticRepository, logged
from hermes_runtime.backup.selection import STAGING_PREFIX
from hermes_runtime.backup.snapshot_tree import LatestTagged, RestoredTree, restore_tree
from hermes_runtime.backup.snapshots import find_snapshot, repository_listing
from hermes_runtime.backup.swap import data_dir_entries, remove_stale_stages, staging_root, swap_in
from hermes_runtime.common.errors import RuntimeFailure, name_list
from hermes_runtime.common.groupaccess import share_tree, shared_umask
from hermes_runtime.common.logs import log_event


@shared_umask()
def restore_snapshot(
    repo: ResticRepository,
    data_dir: Path,
    *,
    snapshot: str = "latest",
    force: bool = False,
    if_empty: bool = False,
    replicas: Replicas | None = None,
) -> RestoreReport:
    """Restore into ``data_dir`` all or nothing: stage beside it, check, then swap by renames.

    With ``replicas`` (continuous replication's location, only for ``latest``), each database
    comes from whichever is newer, the snapshot's copy or its Litestream replica (also a
    database the snapshot lacks: one born after it); with replicas but no snapshot at all
    only the databases come back. The report's ``sources`` says which copy each database came
    from. Without ``replicas`` no replica is read, whatever the target holds: replicas are
    plain files anyone who can write the target may have put there, so the caller opts in.
    Every name from the target (manifest keys, replica keys) must stay inside the staging
    folder (``untrusted.inside``), or the restore fails naming it, ``data_dir`` unchanged.
    """
    started = time.monotonic()
    if replicas is not None and snapshot != "latest":
        raise RuntimeFailure(
            f"snapshot {snapshot}: replicas are for the latest snapshot only (a named snapshot "
            "is restored exactly as it was taken)"
        )
    repo = repo.with_messages_to(logged("backup.restore.restic"))
    existing = data_dir_entries(data_dir)
    if existing and if_empty:
        return RestoreReport(None, str(data_dir), False, "data dir already holds data")
    if existing and not force:
        raise RuntimeFailure(
            f"--data-dir {data_dir} is not empty ({name_list(existing)}); "
            "pass --force to replace its content, or --if-empty to skip"
        )
    early = snapshot == "latest" and replicas is None  # restored beside the listing
    found = None if early else _snapshot_to_restore(repo, snapshot, replicas)
    created = not data_dir.exists()
    data_dir.mkdir(parents=True, exist_ok=True)
    stage_root = staging_root(data_dir)
    tag = f"{STAGING_PREFIX}{data_dir.name}-{os.urandom(4).hex()}"
    stage = stage_root / f"{tag}-stage"
    remove_stale_stages(stage_root, data_dir.name)
    log_event(
        "backup.restore.started",
        snapshot=found.id if found else snapshot,
        data_dir=str(data_dir),
        staging=str(stage),
    )
    staged = None
    if early:
        try:
            found, staged = _restore_latest_beside_listing(repo, stage)
        except BaseException:
            shutil.rmtree(stage, ignore_errors=True)
            if created:
                with contextlib.suppress(OSError):
                    data_dir.rmdir()
            raise
    snapshot_id = found.id if found else None
    try:
        manifest, sources = _stage_restore(repo, found, stage, replicas, staged)
    except (OSError, RuntimeFailure) as exc:
        shutil.rmtree(stage, ignore_errors=True)
        raise RuntimeFailure(
            f"restore of snapshot {snapshot_id or '(none: replicas only)'} into {data_dir} "
            f"failed while staging in {stage}: {exc}; {data_dir} is unchanged"
        ) from exc
    for path, choice in sources.items():
        log_event("backup.restore.database", path=path, **asdict(choice))
    _share_staged(stage, data_dir)
    swap_in(stage, data_dir, stage_root / f"{tag}-old", existing)
    return RestoreReport(
        snapshot_id,
        str(data_dir),
        True,
        "restored",
        files=manifest.files if manifest is not None else 0,
        databases=len(sources),
        duration_seconds=round(time.monotonic() - started, 3),
        sources={path: asdict(choice) for path, choice in sources.items()},
    )


def _share_staged(stage: Path, data_dir: Path) -> None:
    """The staged tree group-writable for the agent; a failure fails the restore, data dir
    unchanged (an agent that cannot write its restored files is no restore)."""
    try:
        shared = share_tree(stage)
    except OSError as exc:
        shutil.rmtree(stage, ignore_errors=True)
        raise RuntimeFailure(
            f"restore into {data_dir}: cannot give the pod's group access to the staged tree "
            f"{stage}: {exc}; {data_dir} is unchanged"
        ) from exc
    log_event("backup.restore.shared", widened=shared.widened, not_owned=shared.not_owned)


def _snapshot_to_restore(
    repo: ResticRepository, snapshot: str, replicas: Replicas | None
) -> SnapshotInfo | None:
    """The snapshot; None only for ``latest`` with replicas and no snapshot in the repository."""
    if replicas is None or snapshot != "latest":
        return find_snapshot(repo, snapshot)
    listing = repository_listing(repo)  # listed once: every restic run derives the key
    if not listing.own and list_replicas(replicas):
        return None
    return find_snapshot(repo, snapshot, listing)


def _restore_latest_beside_listing(
    repo: ResticRepository, stage: Path
) -> tuple[SnapshotInfo, RestoredTree | None]:
    """The latest snapshot, and its tree staged in ``stage`` while it was being listed.

    Why: every restic run derives the repository key first (a deliberately costly step), and a
    restore after the listing would wait for the listing's before starting its own run. Here
    the listing runs beside it, which resolves ``latest`` itself (``LatestTagged``). The
    staged tree counts only if its manifest carries the backup id tagged on the snapshot the
    listing calls latest: a create that lands between them, a snapshot without that tag, or a
    failed run gives None (``stage`` removed; the caller restores the listed snapshot by its
    id, reporting any error anew). Raises only what the listing raises (no snapshot, an
    unreachable repository).
    """
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="restic-list") as pool:
        listing_done = pool.submit(repository_listing, repo)
        staged: RestoredTree | None
        try:  # restic's lines are logged: its retries say why a restore waits on a lost store
            staged = restore_tree(repo, LatestTagged(repo.agent), stage, [NO_LOCK])
        except (OSError, RuntimeFailure) as exc:
            staged, reason = None, str(exc)
        listing = listing_done.result()
    found = find_snapshot(repo, "latest", listing)
    newest = listing.own[-1].backup_id
    if staged is not None and newest and staged.manifest.backup_id == newest:
        return found, staged
    if staged is not None:
        reason = "its tree is not the listed latest snapshot's (a backup landed meanwhile?)"
    log_event("backup.restore.by_id", snapshot=found.id, reason=reason)
    try:  # what is left of the first tree must not mix into the second
        shutil.rmtree(stage)
    except FileNotFoundError:
        pass
    except OSError as exc:
        raise RuntimeFailure(f"cannot empty the staging folder {stage}: {exc}") from exc
    return found, None


def _stage_restore(
    repo: ResticRepository,
    snapshot: SnapshotInfo | None,
    stage: Path,
    replicas: Replicas | None,
    staged: RestoredTree | None = None,
) -> tuple[TreeManifest | None, dict[str, ReplicaChoice]]:
    """The snapshot's tree in ``stage`` (``staged``: already there), then the newer replicas.

    ``snapshot`` None: no snapshot at all, the replicas alone (the manifest is then None).
    """
    tree = staged
    if tree is None and snapshot is not None:
        tree = restore_tree(repo, snapshot, stage, [NO_LOCK])
    elif tree is None:
        stage.mkdir(mode=0o700, parents=True)
    sources: dict[str, ReplicaChoice] = {}
    if tree is not None and snapshot is not None:
        sources = {
            path: ReplicaChoice("restic", record.snapshot_at, snapshot.id, tree.checked[path])
            for path, record in tree.manifest.databases.items()
        }
    manifest = tree.manifest if tree is not None else None
    if replicas is None:
        return manifest, sources
    scratch = stage / MANIFEST_DIR  # removed with the manifest's folder before the swap
    scratch.mkdir(exist_ok=True)
    plans = newer_replicas(replicas, _restic_copies(manifest), scratch)
    restore_replicas(replicas, plans, stage)
    shutil.rmtree(scratch)
    for plan in plans:
        at = plan.last_tx_at.isoformat() if plan.last_tx_at else ""
        sources[plan.relpath] = ReplicaChoice("litestream", at, plan.max_txid, "integrity_check")
    return manifest, dict(sorted(sources.items()))


def _restic_copies(manifest: TreeManifest | None) -> ResticCopies:
    """When each database copy of the snapshot was taken, for the choice against replicas."""
    if manifest is None:
        return ResticCopies(None, {})
    return ResticCopies(
        datetime.fromisoformat(manifest.created_at),
        {
            path: datetime.fromisoformat(record.snapshot_at)
            for path, record in manifest.databases.items()
        },
    )
