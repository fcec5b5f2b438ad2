"""Online, SQLite-safe backups of an agent's data dir into a restic repository, and restore.

Our part: find SQLite databases by header, snapshot them online in one step, check them,
count rows, apply excludes, stage the tree with a manifest. restic's part: the
repository (deduplicated, encrypted, verifiable) on a folder or S3.

Public surface: ``open_repository``, ``create_backup``, ``list_snapshots``,
``verify_snapshot``, ``restore_snapshot``, ``prune_snapshots`` (with ``PrunePolicy``),
``write_backup_metrics`` and the status record the agent's ``/metrics`` exports
(``record_backup_outcome``, ``read_backup_status``). Continuous replication with Litestream:
``replica_location`` and ``replicate`` (with ``ReplicationSettings``); ``restore_snapshot``
takes the replica location to restore each database from whichever copy is newer.
Design and runbook: docs/backup.md.
"""

from hermes_runtime.backup.continuous import ReplicationSettings, find_replicable, replicate
from hermes_runtime.backup.litestream import ReplicaLocation, replica_location
from hermes_runtime.backup.metrics import write_backup_metrics
from hermes_runtime.backup.reports import (
    BackupSummary,
    PrunePolicy,
    PruneReport,
    RestoreReport,
    SnapshotInfo,
    VerifyReport,
)
from hermes_runtime.backup.restic import PASSWORD_VARIABLES, ResticRepository, open_repository
from hermes_runtime.backup.restic_engine import create_restic_backup as create_backup
from hermes_runtime.backup.restic_engine import list_restic_snapshots as list_snapshots
from hermes_runtime.backup.restic_engine import prune_restic_snapshots as prune_snapshots
from hermes_runtime.backup.restic_engine import restore_restic_snapshot as restore_snapshot
from hermes_runtime.backup.restic_engine import verify_restic_snapshot as verify_snapshot
from hermes_runtime.backup.restore import data_dir_has_data
from hermes_runtime.backup.selection import DEFAULT_EXCLUDES
from hermes_runtime.backup.status import (
    BackupStatus,
    backup_status_path,
    read_backup_status,
    record_backup_outcome,
)

__all__ = [
    "DEFAULT_EXCLUDES",
    "PASSWORD_VARIABLES",
    "BackupStatus",
    "BackupSummary",
    "PrunePolicy",
    "PruneReport",
    "ReplicaLocation",
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
    "replicate",
    "restore_snapshot",
    "verify_snapshot",
    "write_backup_metrics",
]
