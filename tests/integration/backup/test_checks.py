"""Which check finds what: ``create``'s ``quick_check``, ``verify``'s full ``integrity_check``.

``create`` runs ``quick_check`` on each snapshot, without the virtual tables' own checks:
every b-tree page is read, FTS5's index is not re-tokenised. An FTS5 index that no longer
matches its text, or an index that disagrees with its table, therefore reaches the
repository; ``verify`` (restore to scratch, then the full ``integrity_check``) finds it,
naming the database, and fails. That is why the chart runs ``verify`` on a schedule.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import apsw
from backup_testlib import BackupTarget, run_cli

from hermes_runtime.backup.manifest import MANIFEST_RELPATH
from hermes_runtime.backup.restic import open_repository, restic_binary


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

    Every b-tree stays sound (quick_check passes); only FTS5's own check finds it.
    """
    conn = apsw.Connection(str(path))
    conn.execute("UPDATE messages_fts_content SET c0 = 'words never indexed' WHERE id = 1")
    conn.close()


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


def test_an_fts_mismatch_passes_create_and_fails_verify(
    target: BackupTarget, tmp_path: Path
) -> None:
    data, scratch = tmp_path / "data", tmp_path / "scratch"
    scratch.mkdir()
    make_fts_database(data / "lcm.db", 20_000)
    break_fts_index(data / "lcm.db")
    args = ("--data-dir", str(data), "--target", target.url, "--work-dir", str(scratch))
    created = run_cli("create", *args, env=target.env)
    assert created.returncode == 0, created.stderr
    assert latest_record(target, "lcm.db")["checked"] == "quick_check"
    assert list(scratch.iterdir()) == [], "the stage is gone"

    verify = run_cli("verify", "--target", target.url, env=target.env)
    assert verify.returncode == 1
    assert "database lcm.db of snapshot" in verify.stderr, verify.stderr
    assert "malformed inverted index for FTS5 table main.messages_fts" in verify.stderr
