"""``verify`` on a read-only target: the verdict comes from the content, the mark is optional.

The target is made truly read-only: as root (CI) the CLI runs in a private
mount namespace where the backup folder is bind-mounted read-only (the way
a PVC is mounted ``readOnly``); as another user its folders are chmod 0555.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from backup_testlib import BackupTarget, file_target, run_cli


def verify_read_only(target: BackupTarget, *extra: str) -> subprocess.CompletedProcess[str]:
    """Run ``backup verify`` while the target's folder cannot be written."""
    assert target.root is not None
    cli = shlex.join(
        [sys.executable, "-m", "hermes_runtime", "backup", "verify", "--target", target.url, *extra]
    )
    if os.geteuid() == 0:
        root = shlex.quote(str(target.root))
        script = f"mount --bind {root} {root} && mount -o remount,bind,ro {root} && exec {cli}"
        argv = ["unshare", "--mount", "--propagation", "private", "sh", "-c", script]
    else:
        argv = ["sh", "-c", f"exec {cli}"]
    return subprocess.run(argv, capture_output=True, text=True, timeout=300, check=False)


@pytest.fixture
def snapshot_target(tmp_path: Path, data_dir: Path) -> Iterator[tuple[BackupTarget, str]]:
    """A file:// target holding one snapshot; as non-root its folders turn 0555."""
    target = file_target(tmp_path)
    created = run_cli("create", "--data-dir", str(data_dir), "--target", target.url)
    assert created.returncode == 0, created.stderr
    assert target.root is not None
    folders = [target.root, *(p for p in target.root.rglob("*") if p.is_dir())]
    if os.geteuid() != 0:
        for folder in folders:
            folder.chmod(0o555)
    yield target, created.stdout.strip()
    for folder in folders:
        folder.chmod(0o755)


def test_verify_on_a_read_only_target_passes_and_warns_naming_the_target(
    snapshot_target: tuple[BackupTarget, str],
) -> None:
    target, snapshot = snapshot_target
    before = target.object_keys()
    result = verify_read_only(target, "--json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["snapshot"] == snapshot
    assert report["problems"] == [] and report["marked"] is False
    warnings = [json.loads(line) for line in result.stderr.splitlines() if "mark_not" in line]
    assert len(warnings) == 1, result.stderr
    assert warnings[0]["level"] == "warning" and warnings[0]["target"] == target.url
    assert target.url in warnings[0]["message"]
    assert "Read-only file system" in result.stderr or "Permission denied" in result.stderr
    assert target.object_keys() == before  # no mark, no temp file left behind


def test_verify_no_mark_skips_the_mark_without_a_warning(
    snapshot_target: tuple[BackupTarget, str],
) -> None:
    target, snapshot = snapshot_target
    result = verify_read_only(target, "--no-mark")
    assert result.returncode == 0, result.stderr
    assert f"snapshot {snapshot}: ok (" in result.stdout
    assert "verified mark not written" in result.stdout
    assert "mark_not_written" not in result.stderr


def test_a_writable_target_gets_the_mark(snapshot_target: tuple[BackupTarget, str]) -> None:
    target, snapshot = snapshot_target
    if os.geteuid() != 0:
        assert target.root is not None
        for folder in [target.root, *(p for p in target.root.rglob("*") if p.is_dir())]:
            folder.chmod(0o755)
    result = run_cli("verify", "--target", target.url, "--json")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["marked"] is True
    assert f"verified/{snapshot}.json" in target.object_keys()


def test_a_corrupt_blob_on_a_read_only_target_still_fails_verification(
    snapshot_target: tuple[BackupTarget, str],
) -> None:
    target, snapshot = snapshot_target
    manifest = json.loads(target.read(f"manifests/{snapshot}.json"))["manifest"]
    memory = next(f for f in manifest["files"] if f["path"] == "memories/MEMORY.md")
    key = f"blobs/{memory['sha256'][:2]}/{memory['sha256']}.zst"
    assert target.root is not None
    blob = target.root / key
    blob.chmod(0o644)  # the test corrupts it from outside; the CLI still sees a read-only target
    blob.write_bytes(b"not zstd at all")
    result = verify_read_only(target)
    assert result.returncode == 1
    assert snapshot in result.stderr and "memories/MEMORY.md" in result.stderr
    assert key in result.stderr
    assert "mark_not_written" not in result.stderr
