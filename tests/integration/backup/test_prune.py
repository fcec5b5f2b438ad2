"""Prune is `restic forget --prune` with our keep flags: it keeps exactly what the policy says."""

from __future__ import annotations

import json
import os
from pathlib import Path

from backup_testlib import BackupTarget, run_cli

from hermes_runtime.backup import create_backup, open_repository


def snapshots_with_unique_files(target: BackupTarget, data_dir: Path, count: int) -> list[str]:
    repo = open_repository(target.url, environ={**os.environ, **target.env})
    ids = []
    for i in range(count):
        (data_dir / "outputs" / f"only-in-{i}.txt").write_text(f"unique content {i}\n")
        if i > 0:
            (data_dir / "outputs" / f"only-in-{i - 1}.txt").unlink()
        ids.append(create_backup(data_dir, repo, work_dir=data_dir.parent).id)
    return ids


def prune(target: BackupTarget, *args: str) -> dict:
    result = run_cli(
        "prune", "--target", target.url, "--grace-seconds", "0", "--json", *args, env=target.env
    )
    assert result.returncode == 0, result.stderr
    report: dict = json.loads(result.stdout)
    return report


def listed(target: BackupTarget) -> list[str]:
    listing = run_cli("list", "--target", target.url, "--json", env=target.env)
    assert listing.returncode == 0, listing.stderr
    return [s["id"] for s in json.loads(listing.stdout)]


def test_prune_keeps_last_n_exactly_and_dry_run_deletes_nothing(
    target: BackupTarget, data_dir: Path
) -> None:
    ids = snapshots_with_unique_files(target, data_dir, 3)
    dry = prune(target, "--keep-last", "2", "--dry-run")
    assert (sorted(dry["kept"]), dry["deleted"], dry["dry_run"]) == (sorted(ids[1:]), ids[:1], True)
    assert listed(target) == ids

    report = prune(target, "--keep-last", "2")
    assert sorted(report["kept"]) == sorted(ids[1:])
    assert report["deleted"] == ids[:1]
    assert listed(target) == ids[1:]
    verified = run_cli("verify", "--target", target.url, "--snapshot", ids[1], env=target.env)
    assert verified.returncode == 0, verified.stderr


def test_prune_refuses_a_policy_that_keeps_nothing(target: BackupTarget, data_dir: Path) -> None:
    snapshots_with_unique_files(target, data_dir, 1)
    result = run_cli("prune", "--target", target.url, "--keep-last", "0", env=target.env)
    assert result.returncode == 2  # a usage error: nothing was contacted or deleted
    assert "--keep-last: must be 1 or more" in result.stderr
