"""``backup verify`` and ``backup list``: is every byte of a snapshot still there and sound?"""

from __future__ import annotations

import json
import shutil
import tempfile
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TextIO

from hermes_runtime.backup.blobs import check_blob, restore_blob
from hermes_runtime.backup.catalog import (
    load_manifest,
    resolve_snapshot,
    snapshot_ids,
    stored_blobs,
    verified_ids,
)
from hermes_runtime.backup.dbsnap import check_database
from hermes_runtime.backup.manifest import Manifest, verified_key
from hermes_runtime.backup.target import Target
from hermes_runtime.common.errors import RuntimeFailure
from hermes_runtime.common.logs import Reporter, log_event, reporter


@dataclass
class VerifyReport:
    """What ``verify`` checked; ``marked``: was the ``verified/<id>.json`` mark stored?"""

    snapshot: str
    files: int
    databases: int
    bytes: int
    problems: list[str] = field(default_factory=list)
    marked: bool = False

    @property
    def ok(self) -> bool:
        return not self.problems


@dataclass
class SnapshotInfo:
    id: str
    created_at: str
    files: int
    databases: int
    bytes: int
    verified: bool
    status: str


def list_snapshots(target: Target) -> list[SnapshotInfo]:
    """Complete snapshots, oldest first; a corrupt manifest shows up with its error."""
    marks = verified_ids(target)
    infos = []
    for snapshot_id in snapshot_ids(target):
        try:
            m = load_manifest(target, snapshot_id)
        except RuntimeFailure as exc:
            infos.append(SnapshotInfo(snapshot_id, "", 0, 0, 0, False, f"corrupt: {exc}"))
            continue
        infos.append(
            SnapshotInfo(
                m.id,
                m.created_at,
                len(m.files),
                len(m.databases),
                m.total_bytes,
                snapshot_id in marks,
                "ok",
            )
        )
    return infos


def verify_snapshot(
    target: Target,
    snapshot: str = "latest",
    *,
    work_dir: Path | None = None,
    stream: TextIO | None = None,
    mark: bool = True,
) -> VerifyReport:
    """Check every blob's sha256 and every database; raise naming what is broken.

    A sound snapshot gets a ``verified/<id>.json`` mark (prune never deletes
    the newest marked one) unless ``mark`` is False. The mark is bookkeeping,
    not the verdict: on a read-only target (a backup PVC mounted read-only,
    read-only S3 credentials) failing to write it is a warning, and the
    verification still succeeds.
    """
    snapshot_id = resolve_snapshot(target, snapshot)
    manifest = load_manifest(target, snapshot_id)
    report = VerifyReport(
        snapshot_id, len(manifest.files), len(manifest.databases), manifest.total_bytes
    )
    present = set(stored_blobs(target))
    scratch = Path(tempfile.mkdtemp(prefix="hermes-verify-", dir=work_dir))
    try:
        with reporter("backup.verify", stream) as progress:
            progress.start_task(f"verify {snapshot_id}", total=manifest.total_bytes)
            _verify_files(target, manifest, present, report, progress)
            _verify_databases(target, manifest, present, report, scratch, progress)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    if report.problems:
        listing = "\n  ".join(report.problems)
        raise RuntimeFailure(
            f"snapshot {snapshot_id} in {target.url} failed verification "
            f"({len(report.problems)} problem(s)):\n  {listing}"
        )
    if mark:
        report.marked = _write_mark(target, snapshot_id, stream)
    return report


def _write_mark(target: Target, snapshot_id: str, stream: TextIO | None) -> bool:
    record = {"snapshot": snapshot_id, "verified_at": datetime.now(UTC).isoformat()}
    try:
        target.put_bytes(verified_key(snapshot_id), json.dumps(record).encode())
    except RuntimeFailure as exc:
        log_event(
            "backup.verify.mark_not_written",
            stream,
            level="warning",
            target=target.url,
            snapshot=snapshot_id,
            message=(
                f"snapshot {snapshot_id} is sound, but the verified mark could not be "
                f"written to {target.url} (read-only target? use --no-mark): {exc}"
            ),
        )
        return False
    return True


def _verify_files(
    target: Target, manifest: Manifest, present: set[str], report: VerifyReport, progress: Reporter
) -> None:
    checked: set[str] = set()
    for record in manifest.files:
        if record.sha256 not in present:
            report.problems.append(f"{record.path}: blob {record.sha256} is missing")
        elif record.sha256 not in checked:
            try:
                check_blob(target, record.sha256)
                checked.add(record.sha256)
            except RuntimeFailure as exc:
                report.problems.append(f"{record.path}: {exc}")
        progress.advance(record.size)


def _verify_databases(
    target: Target,
    manifest: Manifest,
    present: set[str],
    report: VerifyReport,
    scratch: Path,
    progress: Reporter,
) -> None:
    for db in manifest.databases:
        if db.sha256 not in present:
            report.problems.append(f"{db.path}: blob {db.sha256} is missing")
            continue
        copy = scratch / "check.db"
        try:
            restore_blob(target, db.sha256, copy)
        except RuntimeFailure as exc:
            report.problems.append(f"{db.path}: {exc}")
            continue
        check = check_database(copy)
        if not check.ok:
            report.problems.append(f"{db.path}: integrity_check: {check.integrity}")
        elif check.tables != db.tables:
            report.problems.append(f"{db.path}: row counts {check.tables} != manifest {db.tables}")
        for leftover in scratch.iterdir():
            leftover.unlink()
        progress.advance(db.size)
