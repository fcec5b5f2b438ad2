"""``backup prune``: forget old snapshots by policy, then delete blobs nothing references.

Blobs younger than the grace period are never deleted even when no manifest
references them yet: they may belong to a backup that is uploading right now
and writes its manifest last.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import TextIO

from hermes_runtime.backup.catalog import load_manifest, snapshot_ids, stored_blobs, verified_ids
from hermes_runtime.backup.manifest import manifest_key, snapshot_time, verified_key
from hermes_runtime.backup.target import TEMP_MARKER, Target
from hermes_runtime.common.errors import RuntimeFailure
from hermes_runtime.common.logs import reporter

DEFAULT_GRACE_SECONDS = 6 * 3600


@dataclass(frozen=True)
class PrunePolicy:
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
    kept: list[str] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)
    blobs_deleted: int = 0
    bytes_freed: int = 0
    dry_run: bool = False


def select_kept(ids: list[str], policy: PrunePolicy, protected: str | None) -> set[str]:
    """The snapshots a policy keeps (restic-style: the newest one per day/ISO week)."""
    newest_first = sorted(ids, reverse=True)
    kept = set(newest_first[: policy.keep_last])
    kept |= _newest_per_bucket(newest_first, policy.keep_daily, lambda i: snapshot_time(i).date())
    kept |= _newest_per_bucket(
        newest_first, policy.keep_weekly, lambda i: snapshot_time(i).isocalendar()[:2]
    )
    if protected is not None:
        kept.add(protected)
    return kept


def _newest_per_bucket(
    newest_first: list[str], count: int, bucket_of: Callable[[str], Hashable]
) -> set[str]:
    kept: set[str] = set()
    seen: set[Hashable] = set()
    for snapshot_id in newest_first:
        if len(seen) >= count:
            break
        bucket = bucket_of(snapshot_id)
        if bucket not in seen:
            seen.add(bucket)
            kept.add(snapshot_id)
    return kept


def prune_snapshots(
    target: Target,
    policy: PrunePolicy,
    *,
    grace_seconds: float = DEFAULT_GRACE_SECONDS,
    dry_run: bool = False,
    stream: TextIO | None = None,
) -> PruneReport:
    policy.validate()
    ids = snapshot_ids(target)
    marks = verified_ids(target) & set(ids)
    protected = max(marks) if marks else (ids[-1] if ids else None)
    kept = select_kept(ids, policy, protected)
    report = PruneReport(sorted(kept), [i for i in ids if i not in kept], dry_run=dry_run)
    # Read every kept manifest BEFORE deleting anything: an unreadable one
    # would make us delete blobs it still needs.
    referenced: set[str] = set()
    for snapshot_id in report.kept:
        referenced |= load_manifest(target, snapshot_id).blob_digests()
    with reporter("backup.prune", stream) as progress:
        for snapshot_id in report.deleted:
            progress.step("forget", snapshot=snapshot_id)
            if not dry_run:
                target.delete(manifest_key(snapshot_id))
                target.delete(verified_key(snapshot_id))
        cutoff = time.time() - grace_seconds
        for digest, blob in stored_blobs(target).items():
            if digest not in referenced and blob.modified <= cutoff:
                report.blobs_deleted += 1
                report.bytes_freed += blob.size
                if not dry_run:
                    target.delete(blob.key)
        for prefix in ("blobs/", "manifests/"):
            for obj in target.list_objects(prefix):
                if TEMP_MARKER in obj.key and obj.modified <= cutoff and not dry_run:
                    target.delete(obj.key)
        progress.step("finished", kept=len(report.kept), deleted=len(report.deleted))
    return report
