"""How restore and verify show each restored database is the one `create` checked.

`create` records the SHA-256 of each database copy it ran `integrity_check` on. `restore`
compares the joined file against it instead of checking again; `verify` does both. The
snapshots that break the rule here are made with restic alone, as anyone holding the
repository password could: the latest snapshot's tree, changed, backed up again.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

from backup_testlib import (
    BackupTarget,
    assert_left_as_it_was,
    file_target,
    forced_restore_over_data,
    rows,
    run_cli,
)

from hermes_runtime.backup.restic import restic_binary
from hermes_runtime.backup.restic_engine import HOST, MANIFEST_DIR, MANIFEST_RELPATH

Manifest = dict[str, Any]


def restic(target: BackupTarget, *args: str, cwd: Path | None = None) -> str:
    assert target.root is not None
    done = subprocess.run(
        [restic_binary(), "-r", str(target.root), *args],
        env={**os.environ, **target.env},
        cwd=cwd,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, f"restic {args[0]}: {done.stderr}"
    return done.stdout


def latest_manifest(target: BackupTarget) -> Manifest:
    manifest: Manifest = json.loads(restic(target, "dump", "latest", f"/{MANIFEST_RELPATH}"))
    return manifest


def restage(target: BackupTarget, work: Path, change: Callable[[Path, Manifest], None]) -> None:
    """A new latest snapshot: the latest one's tree with `change` applied, by restic alone."""
    tree = work / "tree"
    restic(target, "restore", "latest", "--target", str(tree))
    manifest: Manifest = json.loads((tree / MANIFEST_RELPATH).read_text())
    change(tree, manifest)
    (tree / MANIFEST_RELPATH).write_text(json.dumps(manifest))
    (latest,) = json.loads(restic(target, "snapshots", "--json", "latest"))
    tags = [arg for tag in latest["tags"] for arg in ("--tag", tag)]
    restic(target, "backup", "--host", HOST, *tags, ".", cwd=tree)


def pieces_of(tree: Path, manifest: Manifest, database: str) -> list[Path]:
    folder = tree / manifest["databases"][database]["pieces"]["dir"]
    return sorted(folder.iterdir())


def joined(pieces: list[Path], dest: Path) -> Path:
    dest.write_bytes(b"".join(piece.read_bytes() for piece in pieces))
    return dest


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
    """One letter of a message changed in a piece: SQLite finds nothing wrong, the hash does."""
    target = file_target(tmp_path)
    assert run_cli("create", "--data-dir", str(data_dir), "--target", target.url).returncode == 0
    proof = tmp_path / "changed.db"

    def change_one_letter(tree: Path, manifest: Manifest) -> None:
        pieces = pieces_of(tree, manifest, "lcm.db")
        piece = next(p for p in pieces if b"xxxxxxxx" in p.read_bytes())
        body = piece.read_bytes()
        at = body.index(b"xxxxxxxx")
        piece.chmod(0o600)
        piece.write_bytes(body[:at] + b"y" + body[at + 1 :])
        # What restore would put back: sound to SQLite, same rows, different content.
        joined(pieces, proof)
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


def test_a_snapshot_without_recorded_hashes_gets_integrity_check_and_row_counts(
    data_dir: Path, tmp_path: Path
) -> None:
    """Snapshots made before the manifest carried `sha256` are checked in full, as before."""
    target = file_target(tmp_path)
    assert run_cli("create", "--data-dir", str(data_dir), "--target", target.url).returncode == 0

    def forget_hashes(tree: Path, manifest: Manifest) -> None:
        for record in manifest["databases"].values():
            del record["sha256"]

    restage(target, tmp_path / "old", forget_hashes)
    report = restore_json(target, tmp_path / "restored")
    assert {src["checked"] for src in report["sources"].values()} == {"integrity_check"}

    def miscount(tree: Path, manifest: Manifest) -> None:
        manifest["databases"]["state.db"]["tables"]["messages"] += 1

    restage(target, tmp_path / "miscounted", miscount)
    restore = run_cli("restore", "--target", target.url, "--data-dir", str(tmp_path / "again"))
    assert restore.returncode == 1
    assert "state.db" in restore.stderr and "tables" in restore.stderr, restore.stderr
