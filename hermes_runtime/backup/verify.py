"""``backup verify``: read back every pack, restore to scratch, run the full checks.

``restic check --read-data`` reads every byte of every pack and checks it against its hash,
so a flipped byte anywhere fails it. Then the snapshot is restored to a scratch folder and
every database must hash to the SHA-256 ``create`` recorded, pass the full
``integrity_check`` (the virtual tables' own checks included: FTS5 re-tokenises every row,
which ``create``'s ``quick_check`` leaves out) and give the recorded row counts. This is the
check to run on a schedule (the chart's weekly verify).
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from hermes_runtime.backup.reports import VerifyReport
from hermes_runtime.backup.restic import (
    NO_LOCK,
    RETRY_LOCK,
    ResticRepository,
    logged,
    run_restic,
)
from hermes_runtime.backup.snapshot_tree import restore_tree
from hermes_runtime.backup.snapshots import find_snapshot


def verify_snapshot(
    repo: ResticRepository,
    snapshot: str = "latest",
    *,
    scratch: Path | None = None,
    lock: bool = True,
) -> VerifyReport:
    """Read back every pack (``check --read-data``), then restore to scratch and check the DBs.

    ``lock=False`` (``verify --no-lock``) works on a read-only repository: restic's
    ``--no-lock``, at the price of not excluding a concurrent prune.
    """
    no_lock = list(RETRY_LOCK) if lock else [NO_LOCK]
    repo = repo.with_messages_to(logged("backup.verify.restic"))
    found = find_snapshot(repo, snapshot)
    run_restic(repo, [*no_lock, "check", "--read-data"])
    dest = Path(scratch or tempfile.gettempdir()) / f"hermes-verify-{found.id[:8]}"
    shutil.rmtree(dest, ignore_errors=True)
    try:
        tree = restore_tree(repo, found, dest, no_lock, integrity_check=True)
        size = sum(p.stat().st_size for p in dest.rglob("*") if p.is_file())
    finally:
        shutil.rmtree(dest, ignore_errors=True)
    manifest = tree.manifest
    return VerifyReport(found.id, manifest.files, len(manifest.databases), size, locked=lock)
