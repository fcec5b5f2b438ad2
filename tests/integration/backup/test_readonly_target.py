"""``verify`` on a read-only repository (a PVC mounted ``readOnly``): ``--no-lock`` reads without
restic's lock, so the verdict comes from the content alone.

As root (CI) the CLI runs in a private mount namespace where the backup folder is
bind-mounted read-only; as another user its folders are chmod 0555.
"""

from __future__ import annotations

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
    """A file:// repository holding one snapshot; as non-root its folders turn 0555."""
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


def test_verify_no_lock_passes_on_a_read_only_repository(
    snapshot_target: tuple[BackupTarget, str],
) -> None:
    target, snapshot = snapshot_target
    before = target.object_keys()
    result = verify_read_only(target, "--no-lock")
    assert result.returncode == 0, result.stderr
    assert f"snapshot {snapshot}: ok: " in result.stdout
    assert "without restic's repository lock" in result.stdout
    assert target.object_keys() == before  # no lock file, nothing written


def test_a_flipped_byte_on_a_read_only_repository_still_fails_verification(
    snapshot_target: tuple[BackupTarget, str],
) -> None:
    target, _ = snapshot_target
    assert target.root is not None
    for pack in target.object_keys("data/"):
        path = target.root / pack
        path.chmod(0o644)  # corrupted from outside; the CLI still sees a read-only repository
        body = bytearray(path.read_bytes())
        body[len(body) // 2] ^= 0x01
        path.write_bytes(bytes(body))
    result = verify_read_only(target, "--no-lock")
    assert result.returncode == 1
    assert target.url in result.stderr
