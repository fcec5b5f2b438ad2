"""The two halves of a snapshot's check: every b-tree, and the virtual tables' own checks.

``create`` runs them at once on one copy (``deferred_checks``); together they are
``integrity_check``. Real SQLite files; the FTS5 damage is a row's text changed behind its
index, the b-tree damage an index declared over another column.
"""

from __future__ import annotations

import threading
from pathlib import Path

import apsw

from hermes_runtime.backup.dbsnap import (
    check_database,
    check_virtual_tables,
    snapshot_database,
)


def make_fts_database(path: Path, rows: int) -> None:
    conn = apsw.Connection(str(path))
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("CREATE TABLE notes(id INTEGER PRIMARY KEY, x INTEGER, y INTEGER)")
    conn.execute("CREATE INDEX notes_x ON notes(x)")
    conn.execute("CREATE VIRTUAL TABLE messages_fts USING fts5(body)")
    with conn:
        conn.executemany("INSERT INTO notes(x, y) VALUES (?, ?)", ((i, -i) for i in range(rows)))
        conn.executemany(
            "INSERT INTO messages_fts(rowid, body) VALUES (?, ?)",
            ((i, f"message {i} about plugins and memory") for i in range(rows)),
        )
    conn.close()


def test_fts_damage_is_found_by_the_virtual_table_half_only(tmp_path: Path) -> None:
    make_fts_database(tmp_path / "lcm.db", 2_000)
    conn = apsw.Connection(str(tmp_path / "lcm.db"))
    conn.execute("UPDATE messages_fts_content SET c0 = 'words never indexed' WHERE id = 1")
    conn.close()

    btrees = check_database(tmp_path / "lcm.db", virtual_tables=False)
    assert btrees.ok, "every b-tree, FTS5's shadow tables included, is sound"
    assert btrees.tables["notes"] == 2_000 and btrees.tables["messages_fts_content"] == 2_000
    found = "malformed inverted index for FTS5 table main.messages_fts"
    assert check_virtual_tables(tmp_path / "lcm.db") == found
    assert check_database(tmp_path / "lcm.db").integrity == found, "the whole check finds it"


def test_btree_damage_is_found_without_the_virtual_tables(tmp_path: Path) -> None:
    make_fts_database(tmp_path / "lcm.db", 2_000)
    conn = apsw.Connection(str(tmp_path / "lcm.db"))
    conn.config(apsw.SQLITE_DBCONFIG_DEFENSIVE, 0)
    conn.execute("PRAGMA writable_schema = ON")
    conn.execute(
        "UPDATE sqlite_schema SET sql = 'CREATE INDEX notes_x ON notes(y)' WHERE name = 'notes_x'"
    )
    conn.close()

    btrees = check_database(tmp_path / "lcm.db", virtual_tables=False)
    assert not btrees.ok and "notes_x" in btrees.integrity
    assert check_virtual_tables(tmp_path / "lcm.db") == "ok"


def both_halves_at_once(copy: Path) -> dict[str, str]:
    results: dict[str, str] = {}
    start = threading.Barrier(2)

    def btrees() -> None:
        start.wait()
        results["btrees"] = check_database(copy, virtual_tables=False).integrity

    def virtual() -> None:
        start.wait()
        results["virtual"] = check_virtual_tables(copy)

    threads = [threading.Thread(target=btrees), threading.Thread(target=virtual)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return results


def test_both_halves_open_a_fresh_copy_of_a_wal_database_at_once(tmp_path: Path) -> None:
    """A WAL database's copy has no -shm: the first reader recovers the WAL index, and the
    other, opening meanwhile, must wait for it rather than fail with "database is locked"."""
    make_fts_database(tmp_path / "live.db", 20_000)
    for attempt in range(20):
        copy = tmp_path / f"copy-{attempt}.db"
        snapshot_database(tmp_path / "live.db", copy)
        assert both_halves_at_once(copy) == {"btrees": "ok", "virtual": "ok"}, f"attempt {attempt}"
