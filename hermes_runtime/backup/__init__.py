"""Online, SQLite-safe backups of an agent's data dir to a folder or S3, and restore.

Public surface: ``open_target``, ``create_backup``, ``list_snapshots``,
``verify_snapshot``, ``restore_snapshot``, ``prune_snapshots`` (with
``PrunePolicy``), ``write_backup_metrics`` and the status record the agent's
``/metrics`` exports (``record_backup_outcome``, ``read_backup_status``).
Design and runbook: docs/backup.md.
"""

from hermes_runtime.backup.access import open_target
from hermes_runtime.backup.create import BackupSummary, create_backup
from hermes_runtime.backup.crypto import KEY_ENV as ENCRYPTION_KEY_ENV
from hermes_runtime.backup.metrics import write_backup_metrics
from hermes_runtime.backup.prune import PrunePolicy, PruneReport, prune_snapshots
from hermes_runtime.backup.restore import RestoreReport, data_dir_has_data, restore_snapshot
from hermes_runtime.backup.selection import DEFAULT_EXCLUDES
from hermes_runtime.backup.status import (
    BackupStatus,
    backup_status_path,
    read_backup_status,
    record_backup_outcome,
)
from hermes_runtime.backup.target import Target
from hermes_runtime.backup.verify import SnapshotInfo, VerifyReport, list_snapshots, verify_snapshot

__all__ = [
    "DEFAULT_EXCLUDES",
    "ENCRYPTION_KEY_ENV",
    "BackupStatus",
    "BackupSummary",
    "PrunePolicy",
    "PruneReport",
    "RestoreReport",
    "SnapshotInfo",
    "Target",
    "VerifyReport",
    "backup_status_path",
    "create_backup",
    "data_dir_has_data",
    "list_snapshots",
    "open_target",
    "prune_snapshots",
    "read_backup_status",
    "record_backup_outcome",
    "restore_snapshot",
    "verify_snapshot",
    "write_backup_metrics",
]
