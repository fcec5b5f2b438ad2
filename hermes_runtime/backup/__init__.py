"""Online, SQLite-safe backups of an agent's data dir into a restic repository, and restore.

Our part: find SQLite databases by header, snapshot them online in one step, check them,
count rows, apply excludes, stage the tree with a manifest. restic's part: the
repository (deduplicated, encrypted, verifiable) on a folder or S3.

One module per verb: ``create``, ``snapshots`` (list), ``verify``, ``restore`` (with
``swap``, the all-or-nothing rename), ``prune``, ``continuous`` (replicate); ``staging``
builds the tree ``create`` stores, ``manifest`` is our file inside it, ``snapshot_tree``
restores a tree and checks its databases for ``restore`` and ``verify``.

Every verb acts on one agent's snapshots and replicas (``agents``): a fleet may share a target.

Public surface: ``open_repository``, ``create_backup``, ``list_snapshots`` (and
``repository_listing``: every agent's),
``verify_snapshot``, ``restore_snapshot``, ``prune_snapshots`` (with ``PrunePolicy``),
``write_backup_metrics`` and the status record the agent's ``/metrics`` exports
(``record_backup_outcome``, ``read_backup_status``). Continuous replication with Litestream:
``replica_location`` (the target's ``Replicas``, ``backup/replicas/``) and ``replicate`` (with
``ReplicationSettings``); ``restore_snapshot`` takes the replicas (``replicas_location``, from
the URL ``<target>/litestream``) to restore each database from whichever copy is newer, and
reads no replica without it. Every name a restore reads from the target is checked before it
is joined onto a folder (``untrusted``): whoever can write the target chooses them.
Design and runbook: docs/backup.md.

Each name loads its module on first use (``common/lazyexports.py``): the agent's entrypoint
reads the status record and must not hold restic's wrappers, boto3 and Litestream's for it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from hermes_runtime.common.lazyexports import lazy_exports

if TYPE_CHECKING:
    from hermes_runtime.backup.continuous import ReplicationSettings, find_replicable, replicate
    from hermes_runtime.backup.create import create_backup
    from hermes_runtime.backup.metrics import write_backup_metrics
    from hermes_runtime.backup.prune import prune_snapshots
    from hermes_runtime.backup.replicas.base import Replicas
    from hermes_runtime.backup.replicas.target import replica_location, replicas_location
    from hermes_runtime.backup.reports import (
        BackupSummary,
        PrunePolicy,
        PruneReport,
        RestoreReport,
        SnapshotInfo,
        VerifyReport,
    )
    from hermes_runtime.backup.restic import PASSWORD_VARIABLES, ResticRepository, open_repository
    from hermes_runtime.backup.restore import restore_snapshot
    from hermes_runtime.backup.selection import DEFAULT_EXCLUDES
    from hermes_runtime.backup.snapshots import Listing, list_snapshots, repository_listing
    from hermes_runtime.backup.status import (
        BackupStatus,
        backup_status_path,
        read_backup_status,
        record_backup_outcome,
    )
    from hermes_runtime.backup.swap import data_dir_has_data
    from hermes_runtime.backup.verify import verify_snapshot

_HOMES = {
    "ReplicationSettings": "continuous",
    "find_replicable": "continuous",
    "replicate": "continuous",
    "create_backup": "create",
    "write_backup_metrics": "metrics",
    "prune_snapshots": "prune",
    "Replicas": "replicas.base",
    "replica_location": "replicas.target",
    "replicas_location": "replicas.target",
    "BackupSummary": "reports",
    "PrunePolicy": "reports",
    "PruneReport": "reports",
    "RestoreReport": "reports",
    "SnapshotInfo": "reports",
    "VerifyReport": "reports",
    "PASSWORD_VARIABLES": "restic",
    "ResticRepository": "restic",
    "open_repository": "restic",
    "restore_snapshot": "restore",
    "DEFAULT_EXCLUDES": "selection",
    "Listing": "snapshots",
    "list_snapshots": "snapshots",
    "repository_listing": "snapshots",
    "BackupStatus": "status",
    "backup_status_path": "status",
    "read_backup_status": "status",
    "record_backup_outcome": "status",
    "data_dir_has_data": "swap",
    "verify_snapshot": "verify",
}

__all__ = [
    "DEFAULT_EXCLUDES",
    "PASSWORD_VARIABLES",
    "BackupStatus",
    "BackupSummary",
    "Listing",
    "PrunePolicy",
    "PruneReport",
    "Replicas",
    "ReplicationSettings",
    "ResticRepository",
    "RestoreReport",
    "SnapshotInfo",
    "VerifyReport",
    "backup_status_path",
    "create_backup",
    "data_dir_has_data",
    "find_replicable",
    "list_snapshots",
    "open_repository",
    "prune_snapshots",
    "read_backup_status",
    "record_backup_outcome",
    "replica_location",
    "replicas_location",
    "replicate",
    "repository_listing",
    "restore_snapshot",
    "verify_snapshot",
    "write_backup_metrics",
]

__getattr__ = lazy_exports(__name__, _HOMES)
