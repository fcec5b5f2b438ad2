"""Prune keeps exactly what the policy says, never the newest verified snapshot,
and deletes exactly the blobs no remaining manifest references."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from backup_testlib import BackupTarget, file_target, run_cli

from hermes_runtime.backup import create_backup, open_target


def blob_of(content: bytes) -> str:
    digest = hashlib.sha256(content).hexdigest()
    return f"blobs/{digest[:2]}/{digest}.zst"


def snapshots_with_unique_files(target: BackupTarget, data_dir: Path, count: int) -> list[str]:
    lib_target = open_target(target.url)
    ids = []
    for i in range(count):
        (data_dir / "outputs" / f"only-in-{i}.txt").write_text(f"unique content {i}\n")
        if i > 0:
            (data_dir / "outputs" / f"only-in-{i - 1}.txt").unlink()
        ids.append(create_backup(data_dir, lib_target).id)
    return ids


def prune(target: BackupTarget, *args: str) -> dict:
    result = run_cli(
        "prune", "--target", target.url, "--grace-seconds", "0", "--json", *args, env=target.env
    )
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def test_keep_last_protects_newest_verified_and_collects_unreferenced_blobs(
    data_dir: Path, tmp_path: Path
) -> None:
    target = file_target(tmp_path)
    ids = snapshots_with_unique_files(target, data_dir, 4)
    assert run_cli("verify", "--target", target.url, "--snapshot", ids[1]).returncode == 0

    dry = prune(target, "--keep-last", "1", "--dry-run")
    assert dry["deleted"] == [ids[0], ids[2]]
    assert len(target.object_keys("manifests/")) == 4

    report = prune(target, "--keep-last", "1")
    assert report["kept"] == [ids[1], ids[3]]
    remaining = set(target.object_keys())
    assert remaining >= {f"manifests/{ids[1]}.json", f"manifests/{ids[3]}.json"}
    assert not any(f"manifests/{ids[i]}.json" in remaining for i in (0, 2))
    assert blob_of(b"unique content 0\n") not in remaining
    assert blob_of(b"unique content 2\n") not in remaining
    assert blob_of(b"unique content 1\n") in remaining
    assert blob_of(b"unique content 3\n") in remaining
    assert blob_of(b"- the user likes tea\n") in remaining
    assert report["blobs_deleted"] >= 2
    for kept in (ids[1], ids[3]):
        assert run_cli("verify", "--target", target.url, "--snapshot", kept).returncode == 0


def test_prune_keeps_last_n_exactly(
    target: BackupTarget, data_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, value in target.env.items():  # the library reads the standard AWS variables
        monkeypatch.setenv(name, value)
    ids = snapshots_with_unique_files(target, data_dir, 3)
    report = prune(target, "--keep-last", "2")
    assert report["kept"] == ids[1:]
    assert report["deleted"] == ids[:1]
    listing = run_cli("list", "--target", target.url, "--json", env=target.env)
    assert [s["id"] for s in json.loads(listing.stdout)] == ids[1:]


def test_prune_touches_nothing_when_a_kept_manifest_is_corrupt(
    data_dir: Path, tmp_path: Path
) -> None:
    target = file_target(tmp_path)
    ids = snapshots_with_unique_files(target, data_dir, 3)
    target.write(f"manifests/{ids[2]}.json", b"{ truncated")
    before = target.object_keys()
    result = run_cli("prune", "--target", target.url, "--keep-last", "1", "--grace-seconds", "0")
    assert result.returncode == 1
    assert ids[2] in result.stderr and "corrupt" in result.stderr
    assert target.object_keys() == before
