"""Client-side encryption: nothing readable in the target, and keys are enforced."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from backup_testlib import BackupTarget, rows, run_cli, tree_fingerprint

SECRET = "3q2+7w8gUaGbX0s1Yx4lJm9NcVdKzPfT"  # 32 random characters, as the docs ask


def test_encrypted_round_trip_leaves_nothing_readable(
    target: BackupTarget, data_dir: Path, tmp_path: Path
) -> None:
    env = {**target.env, "HERMES_BACKUP_ENCRYPTION_KEY": SECRET}
    created = run_cli(
        "create", "--data-dir", str(data_dir), "--target", target.url, "--json", env=env
    )
    assert created.returncode == 0, created.stderr
    snapshot = json.loads(created.stdout)["id"]
    second = run_cli(
        "create", "--data-dir", str(data_dir), "--target", target.url, "--json", env=env
    )
    assert json.loads(second.stdout)["files_uploaded"] == 0  # dedup still works

    stored = b"".join(target.read(k) for k in target.object_keys() if k != "encryption.json")
    for plaintext in (b"the user likes tea", b"careful agent", b"memories/MEMORY.md", b"messages"):
        assert plaintext not in stored

    assert (
        run_cli("verify", "--target", target.url, "--snapshot", snapshot, env=env).returncode == 0
    )
    restored = tmp_path / "restored"
    result = run_cli("restore", "--target", target.url, "--data-dir", str(restored), env=env)
    assert result.returncode == 0, result.stderr
    assert (restored / "memories" / "MEMORY.md").read_text() == "- the user likes tea\n"
    assert rows(restored / "state.db", "SELECT count(*) FROM messages") == [(500,)]
    assert tree_fingerprint(restored)["SOUL.md"] == tree_fingerprint(data_dir)["SOUL.md"]


def test_missing_or_wrong_key_is_refused_and_plain_targets_refuse_a_key(
    target: BackupTarget, data_dir: Path, tmp_path: Path
) -> None:
    env = {**target.env, "HERMES_BACKUP_ENCRYPTION_KEY": SECRET}
    assert (
        run_cli("create", "--data-dir", str(data_dir), "--target", target.url, env=env).returncode
        == 0
    )

    no_key = run_cli("list", "--target", target.url, env=target.env)
    assert no_key.returncode == 1 and "is encrypted" in no_key.stderr
    wrong = {**target.env, "HERMES_BACKUP_ENCRYPTION_KEY": "x" * 32}
    wrong_key = run_cli(
        "restore", "--target", target.url, "--data-dir", str(tmp_path / "r"), env=wrong
    )
    assert wrong_key.returncode == 1 and "another key" in wrong_key.stderr
    assert SECRET not in wrong_key.stderr and "x" * 32 not in wrong_key.stderr
    assert not (tmp_path / "r").exists()


def test_a_flipped_byte_in_an_encrypted_blob_is_named(target: BackupTarget, data_dir: Path) -> None:
    env = {**target.env, "HERMES_BACKUP_ENCRYPTION_KEY": SECRET}
    created = run_cli("create", "--data-dir", str(data_dir), "--target", target.url, env=env)
    snapshot = created.stdout.strip()
    digest = hashlib.sha256(b"- the user likes tea\n").hexdigest()
    key = f"blobs/{digest[:2]}/{digest}.zst"
    body = bytearray(target.read(key))
    body[-3] ^= 0x40
    target.write(key, bytes(body))
    verify = run_cli("verify", "--target", target.url, env=env)
    assert verify.returncode == 1
    assert (
        snapshot in verify.stderr and "memories/MEMORY.md" in verify.stderr and key in verify.stderr
    )
