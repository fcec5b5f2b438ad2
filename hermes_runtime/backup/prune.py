"""``backup prune``: ``restic forget --prune`` with our keep flags, on the agent's snapshots only.

Only snapshots with our tag and the agent's host (``agents``) are considered: in a repository a
fleet shares, one agent's keep rules never forget another agent's snapshots. After ``restic
unlock``, which removes only stale locks (a killed backup's). restic's repository locks keep a
prune from deleting data a running backup needs. The report holds what ``forget --json`` says,
the snapshots kept and removed, and nothing more: restic gives no machine-readable count of the
blobs or bytes a prune frees.
"""

from __future__ import annotations

from hermes_runtime.backup.reports import PrunePolicy, PruneReport
from hermes_runtime.backup.restic import (
    RETRY_LOCK,
    ResticRepository,
    json_document,
    logged,
    run_restic,
)
from hermes_runtime.backup.snapshots import TAG


def prune_snapshots(
    repo: ResticRepository, policy: PrunePolicy, *, dry_run: bool = False
) -> PruneReport:
    """Forget the snapshots ``policy`` does not keep and prune the data only they used."""
    args = [*RETRY_LOCK, "forget", "--json", "--tag", TAG, "--host", repo.agent]
    args += ["--group-by", "host"]
    args += ["--keep-last", str(policy.keep_last)]
    if policy.keep_daily:
        args += ["--keep-daily", str(policy.keep_daily)]
    if policy.keep_weekly:
        args += ["--keep-weekly", str(policy.keep_weekly)]
    args += ["--dry-run"] if dry_run else ["--prune"]
    repo = repo.with_messages_to(logged("backup.prune.restic"))
    run_restic(repo, ["unlock"])  # only stale locks: those of a killed backup
    done = run_restic(repo, args)
    groups = json_document(done.stdout) or []
    kept = [s["id"] for g in groups for s in g.get("keep") or []]
    deleted = [s["id"] for g in groups for s in g.get("remove") or []]
    return PruneReport(kept=kept, deleted=deleted, dry_run=dry_run)
