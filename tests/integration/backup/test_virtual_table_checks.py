"""FTS5's own check (the virtual tables' part of ``integrity_check``) beside restic's upload.

``create`` checks every b-tree before restic starts and, when the scratch space can hold the
database's copy and its pieces together, runs FTS5's check (it re-tokenises every row) while
restic stores the snapshot; a failure then removes the snapshot. Without that room it checks
everything first, as before. Either way a database whose FTS5 index no longer matches its
text leaves no new snapshot, and the error names the file.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import apsw
import pytest
from backup_testlib import BackupTarget, run_cli

from hermes_runtime.backup.restic import open_repository, restic_binary
from hermes_runtime.backup.restic_engine import CHECKED_DURING_UPLOAD, MANIFEST_RELPATH


def make_fts_database(path: Path, rows: int) -> None:
    """What LCM keeps: messages with an FTS5 index over them."""
    path.parent.mkdir(parents=True, exist_ok=True)
    conn = apsw.Connection(str(path))
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("CREATE VIRTUAL TABLE messages_fts USING fts5(body)")
    with conn:
        conn.executemany(
            "INSERT INTO messages_fts(rowid, body) VALUES (?, ?)",
            ((i, f"message {i} about plugins, memory and the agent's tools") for i in range(rows)),
        )
    conn.close()


def break_fts_index(path: Path) -> None:
    """The text of one row changes behind FTS5's back: its index still holds the old words.

    Every b-tree stays sound (the b-tree check passes); only FTS5's own check finds it.
    """
    conn = apsw.Connection(str(path))
    conn.execute("UPDATE messages_fts_content SET c0 = 'words never indexed' WHERE id = 1")
    conn.close()


def snapshot_count(target: BackupTarget) -> int:
    listed = run_cli("list", "--target", target.url, "--json", env=target.env)
    assert listed.returncode == 0, listed.stderr
    return len(json.loads(listed.stdout))


def latest_record(target: BackupTarget, path: str) -> dict[str, object]:
    """The latest snapshot's manifest record of ``path``, read by restic alone."""
    repo = open_repository(target.url, environ={**os.environ, **target.env})
    command = [restic_binary(), "--repo", repo.repository, *repo.options]
    dumped = subprocess.run(
        [*command, "dump", "latest", f"/{MANIFEST_RELPATH}"],
        env=dict(repo.env),
        capture_output=True,
        text=True,
        check=True,
    )
    record: dict[str, object] = json.loads(dumped.stdout)["databases"][path]
    return record


@pytest.fixture
def tight_tmpfs(tmp_path: Path) -> Iterator[Path]:
    """A 48 MiB tmpfs: room for a small database's copy and pieces, not for the margin the
    check beside the upload asks (``deferred_checks.ROOM_MARGIN_BYTES``). Needs root, as CI."""
    mount_point = tmp_path / "tight"
    mount_point.mkdir()
    subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=48m", "tmpfs", str(mount_point)], check=True
    )
    try:
        yield mount_point
    finally:
        subprocess.run(["umount", "-l", str(mount_point)], check=True)


def create(target: BackupTarget, data: Path, scratch: Path) -> subprocess.CompletedProcess[str]:
    args = ("create", "--data-dir", str(data), "--target", target.url, "--work-dir", str(scratch))
    return run_cli(*args, env=target.env)


def test_an_fts_mismatch_found_during_the_upload_removes_the_snapshot(
    target: BackupTarget, tmp_path: Path
) -> None:
    data, scratch = tmp_path / "data", tmp_path / "scratch"
    scratch.mkdir()
    make_fts_database(data / "lcm.db", 20_000)
    first = create(target, data, scratch)
    assert first.returncode == 0, first.stderr
    assert latest_record(target, "lcm.db")["virtual_tables"] == CHECKED_DURING_UPLOAD
    assert '"backup.create.virtual_tables_checked"' in first.stderr, (
        "the wait for the check is logged"
    )

    break_fts_index(data / "lcm.db")
    failed = create(target, data, scratch)
    assert failed.returncode == 1
    assert str(data / "lcm.db") in failed.stderr
    assert "malformed inverted index for FTS5 table main.messages_fts" in failed.stderr
    assert "virtual tables" in failed.stderr and "was removed" in failed.stderr
    assert snapshot_count(target) == 1, "the snapshot restic saved was forgotten"
    assert list(scratch.iterdir()) == [], "the copies and the stage are gone"


def test_without_room_for_both_the_whole_check_runs_before_restic(
    target: BackupTarget, tmp_path: Path, tight_tmpfs: Path
) -> None:
    data = tmp_path / "data"
    make_fts_database(data / "lcm.db", 20_000)
    first = create(target, data, tight_tmpfs)
    assert first.returncode == 0, first.stderr
    assert "virtual_tables" not in latest_record(target, "lcm.db"), "checked before the upload"

    break_fts_index(data / "lcm.db")
    failed = create(target, data, tight_tmpfs)
    assert failed.returncode == 1
    assert str(data / "lcm.db") in failed.stderr
    assert "snapshot fails integrity_check: malformed inverted index" in failed.stderr
    assert "was removed" not in failed.stderr, "restic never ran: nothing to remove"
    assert snapshot_count(target) == 1
    assert list(tight_tmpfs.iterdir()) == []
