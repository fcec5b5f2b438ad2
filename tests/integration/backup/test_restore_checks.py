"""How restore and verify show each restored database is the one `create` checked.

`create` records the SHA-256 of each database copy it ran `quick_check` on. `restore`
compares the restored file against it instead of checking again; `verify` does both, with the
full `integrity_check`. A manifest
without those hashes, or of another format, is refused. The
snapshots that break the rule here are made with restic alone, as anyone holding the
repository password could: the latest snapshot's tree, changed, backed up again.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from backup_testlib import (
    BackupTarget,
    Manifest,
    assert_left_as_it_was,
    file_target,
    forced_restore_over_data,
    restage,
    restic,
    rows,
    run_cli,
)

from hermes_runtime.backup.manifest import MANIFEST_DIR, MANIFEST_RELPATH


def latest_manifest(target: BackupTarget) -> Manifest:
    manifest: Manifest = json.loads(restic(target, "dump", "latest", f"/{MANIFEST_RELPATH}"))
    return manifest


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def restore_json(target: BackupTarget, data_dir: Path) -> dict[str, Any]:
    done = run_cli(
        "restore", "--target", target.url, "--data-dir", str(data_dir), "--json", env=target.env
    )
    assert done.returncode == 0, done.stderr
    report: dict[str, Any] = json.loads(done.stdout)
    return report


def test_restore_shows_each_database_is_the_copy_create_checked(
    data_dir: Path, tmp_path: Path
) -> None:
    target = file_target(tmp_path)
    created = run_cli("create", "--data-dir", str(data_dir), "--target", target.url)
    assert created.returncode == 0, created.stderr
    recorded = {path: db["sha256"] for path, db in latest_manifest(target)["databases"].items()}
    assert sorted(recorded) == ["lcm.db", "state.db"]

    out = tmp_path / "restored"
    report = restore_json(target, out)
    assert {path: src["checked"] for path, src in report["sources"].items()} == {
        "lcm.db": "sha256",
        "state.db": "sha256",
    }
    assert {path: sha256(out / path) for path in recorded} == recorded
    assert rows(out / "lcm.db", "PRAGMA integrity_check") == [("ok",)]
    assert not (out / MANIFEST_DIR).exists()

    verify = run_cli("verify", "--target", target.url, env=target.env)
    assert verify.returncode == 0, verify.stderr


def test_a_changed_byte_that_integrity_check_cannot_see_stops_restore_and_verify(
    data_dir: Path, tmp_path: Path
) -> None:
    """One letter of a message changed in the database: SQLite finds nothing wrong, the hash
    does."""
    target = file_target(tmp_path)
    assert run_cli("create", "--data-dir", str(data_dir), "--target", target.url).returncode == 0
    proof = tmp_path / "changed.db"

    def change_one_letter(tree: Path, manifest: Manifest) -> None:
        database = tree / "lcm.db"
        body = database.read_bytes()
        at = body.index(b"xxxxxxxx")
        database.chmod(0o600)
        database.write_bytes(body[:at] + b"y" + body[at + 1 :])
        # What restore would put back: sound to SQLite, same rows, different content.
        proof.write_bytes(database.read_bytes())
        assert rows(proof, "PRAGMA integrity_check") == [("ok",)]
        counted = rows(proof, "SELECT count(*) FROM messages")
        assert counted == [(manifest["databases"]["lcm.db"]["tables"]["messages"],)]

    restage(target, tmp_path, change_one_letter)

    restore, existing = forced_restore_over_data(target, tmp_path)
    assert restore.returncode == 1
    assert "lcm.db" in restore.stderr and "SHA-256" in restore.stderr, restore.stderr
    assert sha256(proof) in restore.stderr and "unchanged" in restore.stderr
    assert_left_as_it_was(existing)

    verify = run_cli("verify", "--target", target.url, env=target.env)
    assert verify.returncode == 1
    assert "lcm.db" in verify.stderr and "SHA-256" in verify.stderr, verify.stderr


def test_a_manifest_without_recorded_hashes_or_of_another_format_is_refused(
    data_dir: Path, tmp_path: Path
) -> None:
    """No reader of unreleased manifest formats is left: a record without `sha256` (format 1
    had none) or a manifest of any other format fails restore and verify, naming what it lacks,
    and the data dir is unchanged."""
    target = file_target(tmp_path)
    assert run_cli("create", "--data-dir", str(data_dir), "--target", target.url).returncode == 0

    def forget_hashes(tree: Path, manifest: Manifest) -> None:
        del manifest["databases"]["state.db"]["sha256"]

    restage(target, tmp_path / "unhashed", forget_hashes)
    restore, existing = forced_restore_over_data(target, tmp_path)
    assert restore.returncode == 1
    assert "database 'state.db' lacks sha256" in restore.stderr, restore.stderr
    assert_left_as_it_was(existing)
    verify = run_cli("verify", "--target", target.url, env=target.env)
    assert verify.returncode == 1 and "lacks sha256" in verify.stderr, verify.stderr

    def first_format(tree: Path, manifest: Manifest) -> None:
        manifest["format"] = 1

    restage(target, tmp_path / "format-1", first_format)
    restore = run_cli("restore", "--target", target.url, "--data-dir", str(tmp_path / "again"))
    assert restore.returncode == 1
    assert "is format 1; this hermes-runtime reads format" in restore.stderr, restore.stderr
