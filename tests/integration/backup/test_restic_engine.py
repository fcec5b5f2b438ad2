"""The restic engine against a real restic binary, on a folder and on SeaweedFS S3."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from backup_testlib import BackupTarget, make_database, rows, tree_fingerprint

from hermes_runtime.backup import PrunePolicy
from hermes_runtime.backup.restic import open_repository, restic_binary
from hermes_runtime.backup.restic_engine import (
    MANIFEST_RELPATH,
    create_restic_backup,
    list_restic_snapshots,
    prune_restic_snapshots,
    restore_restic_snapshot,
    verify_restic_snapshot,
)
from hermes_runtime.common.errors import RuntimeFailure

PASSWORD = {"RESTIC_PASSWORD": "correct horse battery staple"}


def _repo(target: BackupTarget):  # type: ignore[no-untyped-def]
    return open_repository(target.url, environ={**os.environ, **target.env, **PASSWORD})


def test_create_verify_restore_round_trip(
    target: BackupTarget, data_dir: Path, tmp_path: Path
) -> None:
    repo = _repo(target)
    summary = create_restic_backup(data_dir, repo, work_dir=tmp_path / "scratch")
    assert summary.databases == {"lcm.db": {"messages": 300}, "state.db": {"messages": 500}}
    assert [s.id for s in list_restic_snapshots(repo)] == [summary.id]
    report = verify_restic_snapshot(repo, scratch=tmp_path / "scratch")
    assert (report.snapshot, report.databases) == (summary.id, 2)

    restored = tmp_path / "restored"
    done = restore_restic_snapshot(repo, restored)
    assert done.restored and done.databases == 2
    expected = {
        k: v
        for k, v in tree_fingerprint(data_dir).items()
        if not k.startswith((".git-sync", "cache")) and k not in (".env", "auth.json")
    }
    assert tree_fingerprint(restored) == expected
    assert rows(restored / "state.db", "SELECT count(*) FROM messages") == [(500,)]
    assert not (restored / MANIFEST_RELPATH).exists()

    again = create_restic_backup(data_dir, repo, work_dir=tmp_path / "scratch")
    assert again.bytes_uploaded < 1_000_000, "an unchanged data dir adds almost nothing"


def test_missing_password_is_a_clear_error(target: BackupTarget) -> None:
    environ = {k: v for k, v in {**os.environ, **target.env}.items() if "RESTIC" not in k}
    with pytest.raises(RuntimeFailure, match="RESTIC_PASSWORD"):
        open_repository(target.url, environ=environ)


def test_prune_keeps_the_policy(target: BackupTarget, data_dir: Path, tmp_path: Path) -> None:
    repo = _repo(target)
    ids = []
    for i in range(3):
        make_database(data_dir / "state.db", 10 + i)
        ids.append(create_restic_backup(data_dir, repo, work_dir=tmp_path).id)
    report = prune_restic_snapshots(repo, PrunePolicy(keep_last=1))
    assert report.kept == [ids[-1]]
    assert sorted(report.deleted) == sorted(ids[:-1])
    assert [s.id for s in list_restic_snapshots(repo)] == [ids[-1]]


def test_a_flipped_byte_in_a_pack_fails_verify(data_dir: Path, tmp_path: Path) -> None:
    root = tmp_path / "repo"
    repo = open_repository(f"file://{root}", environ={**os.environ, **PASSWORD})
    create_restic_backup(data_dir, repo, work_dir=tmp_path)
    packs = sorted((root / "data").rglob("*"), key=lambda p: p.stat().st_size if p.is_file() else 0)
    pack = packs[-1]
    os.chmod(pack, 0o600)
    body = bytearray(pack.read_bytes())
    body[len(body) // 2] ^= 0x01
    pack.write_bytes(bytes(body))
    with pytest.raises(RuntimeFailure, match="check"):
        verify_restic_snapshot(repo, scratch=tmp_path)


def test_plain_restic_restores_the_data_dir(data_dir: Path, tmp_path: Path) -> None:
    """The runbook's way without our CLI: `restic restore latest --target DIR`."""
    root = tmp_path / "repo"
    repo = open_repository(f"file://{root}", environ={**os.environ, **PASSWORD})
    create_restic_backup(data_dir, repo, work_dir=tmp_path)
    out = tmp_path / "plain"
    subprocess.run(
        [restic_binary(), "-r", str(root), "restore", "latest", "--target", str(out)],
        env={**os.environ, **PASSWORD},
        check=True,
        capture_output=True,
    )
    assert (out / "memories" / "MEMORY.md").read_text() == "- the user likes tea\n"
    assert rows(out / "lcm.db", "PRAGMA integrity_check") == [("ok",)]
    assert (out / MANIFEST_RELPATH).exists()
