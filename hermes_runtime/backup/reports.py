"""The records the backup commands return (``--json`` prints them as they are)."""

from __future__ import annotations

from dataclasses import dataclass, field

from hermes_runtime.common.errors import RuntimeFailure


@dataclass
class BackupSummary:
    """What ``create`` did; ``--json`` prints it and the status record keeps part of it."""

    id: str
    target: str
    duration_seconds: float
    bytes_read: int
    bytes_uploaded: int
    files: int
    files_uploaded: int
    files_unchanged: int
    databases: dict[str, dict[str, int]] = field(default_factory=dict)
    skipped: list[str] = field(default_factory=list)


@dataclass
class SnapshotInfo:
    id: str
    created_at: str
    files: int
    databases: int
    bytes: int
    status: str  # "ok": restic lists only snapshots it finished writing
    # What `create --label KEY=VALUE` attached, e.g. {"pre-upgrade": "to 0.2.0, revision 5"}.
    labels: dict[str, str] = field(default_factory=dict)
    agent: str = ""  # whose snapshot (restic's host; ``agents``)


@dataclass
class VerifyReport:
    """What ``verify`` checked: every pack read back by restic, then the snapshot restored to
    scratch with each database matched to its recorded SHA-256 and ``integrity_check``.

    ``locked``: whether restic held its repository lock (``--no-lock`` reads without it).
    A report is a success: a failed check raises, naming what failed, so ``problems`` is
    always empty (it stays in ``verify --json`` for the readers of that document).
    """

    snapshot: str
    files: int
    databases: int
    bytes: int
    problems: list[str] = field(default_factory=list)
    locked: bool = True


@dataclass
class RestoreReport:
    """What ``restore`` did; ``sources`` says, per database, which copy came back.

    ``sources[path]`` is ``{"source": "restic"|"litestream", "at": ISO time, "ref": snapshot id
    or Litestream's last transaction id}``.
    """

    snapshot: str | None
    data_dir: str
    restored: bool
    reason: str
    files: int = 0
    databases: int = 0
    bytes: int = 0
    duration_seconds: float = 0.0
    sources: dict[str, dict[str, str]] = field(default_factory=dict)


@dataclass(frozen=True)
class PrunePolicy:
    """Our keep flags, handed to ``restic forget``."""

    keep_last: int = 0
    keep_daily: int = 0
    keep_weekly: int = 0

    def validate(self) -> None:
        for name in ("keep_last", "keep_daily", "keep_weekly"):
            if getattr(self, name) < 0:
                raise RuntimeFailure(f"--{name.replace('_', '-')} must be >= 0")
        if self.keep_last + self.keep_daily + self.keep_weekly == 0:
            raise RuntimeFailure("--keep-last, --keep-daily or --keep-weekly must keep something")


@dataclass
class PruneReport:
    """The snapshots ``restic forget`` kept and removed (what its JSON says, nothing more)."""

    kept: list[str] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)
    dry_run: bool = False
