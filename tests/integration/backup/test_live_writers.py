"""Backups while other processes keep committing every few milliseconds.

The restored databases must pass ``integrity_check``, hold every row that
was committed before the backup started, and be transaction-consistent
(the ledger and its running total agree: nothing torn).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from backup_testlib import BackupTarget, rows, run_cli
from ledger_writer import prepare

from hermes_runtime.backup import create_backup, open_repository, restore_snapshot

WRITER = Path(__file__).with_name("ledger_writer.py")


def committed_rows(db: Path) -> int:
    return int(rows(db, "SELECT count(*) FROM ledger")[0][0])  # type: ignore[call-overload]


@pytest.fixture
def live_data_dir(tmp_path: Path) -> Iterator[Path]:
    """state.db (small) and lcm.db (about 24 MB), each with its own writer process."""
    d = tmp_path / "data"
    d.mkdir()
    prepare(d / "state.db", 200, 100)
    prepare(d / "lcm.db", 6000, 4000)
    (d / "SOUL.md").write_text("soul\n")
    writers = [
        subprocess.Popen([sys.executable, str(WRITER), str(d / name), "0.002", "300"])
        for name in ("state.db", "lcm.db")
    ]
    try:
        deadline = time.monotonic() + 30
        while committed_rows(d / "state.db") < 220 or committed_rows(d / "lcm.db") < 6020:
            assert time.monotonic() < deadline, "writers did not start committing"
            assert all(w.poll() is None for w in writers), "a writer died"
            time.sleep(0.05)
        yield d
        assert all(w.poll() is None for w in writers), "a writer died during the backup"
    finally:
        for w in writers:
            w.kill()
            w.wait()


def assert_consistent(db: Path, at_least: int) -> None:
    assert rows(db, "PRAGMA integrity_check") == [("ok",)]
    (count, max_id, total_amount) = rows(db, "SELECT count(*), max(id), sum(amount) FROM ledger")[0]
    assert count >= at_least  # type: ignore[operator]
    assert count == max_id  # no row lost in the middle
    assert rows(db, "SELECT n, amount FROM totals") == [(count, total_amount)]


def test_backup_under_constant_commits_restores_consistent_databases(
    target: BackupTarget, live_data_dir: Path, tmp_path: Path
) -> None:
    before = {name: committed_rows(live_data_dir / name) for name in ("state.db", "lcm.db")}
    created = run_cli(
        "create",
        "--data-dir",
        str(live_data_dir),
        "--target",
        target.url,
        "--json",
        env=target.env,
    )
    assert created.returncode == 0, created.stderr
    summary = json.loads(created.stdout)
    after = {name: committed_rows(live_data_dir / name) for name in ("state.db", "lcm.db")}
    assert after["state.db"] > before["state.db"]  # the writers really ran during the backup

    restored = tmp_path / "restored"
    result = run_cli("restore", "--target", target.url, "--data-dir", str(restored), env=target.env)
    assert result.returncode == 0, result.stderr
    for name in ("state.db", "lcm.db"):
        assert_consistent(restored / name, before[name])
        assert summary["databases"][name]["ledger"] == committed_rows(restored / name)


def test_library_create_and_restore_are_consistent_too(live_data_dir: Path, tmp_path: Path) -> None:
    (tmp_path / "vol").mkdir()
    target = open_repository(f"file://{tmp_path / 'vol'}")
    before = committed_rows(live_data_dir / "lcm.db")
    summary = create_backup(live_data_dir, target)
    restore_snapshot(target, tmp_path / "restored", snapshot=summary.id)
    assert_consistent(tmp_path / "restored" / "lcm.db", before)
