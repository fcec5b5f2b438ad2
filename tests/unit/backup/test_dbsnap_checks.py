"""The two checks of a database copy: ``create``'s ``quick_check`` and ``verify``'s full one.

``create`` runs ``PRAGMA quick_check`` on each snapshot, leaving out the virtual tables' own
checks (FTS5's re-tokenises every row, and ignores "quick"): every page of every b-tree is
read and checked. What it does not look at, an index whose entries disagree with its table
and an FTS5 index that no longer matches its text, is found by the full ``integrity_check``
that ``verify`` runs on a restored copy. Real SQLite files, damaged in three ways.
"""

from __future__ import annotations

from pathlib import Path

import apsw

from hermes_runtime.backup.dbsnap import check_database, snapshot_database

FTS_DAMAGE = "malformed inverted index for FTS5 table main.messages_fts"


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
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()


def break_a_btree_page(path: Path) -> None:
    """The root page of ``notes`` gets a page type no b-tree page has (byte 0 of its header)."""
    conn = apsw.Connection(str(path))
    ((root,),) = conn.execute("SELECT rootpage FROM sqlite_schema WHERE name = 'notes'")
    ((page_size,),) = conn.execute("PRAGMA page_size")
    conn.close()
    with path.open("r+b") as file:
        file.seek((int(root) - 1) * int(page_size))  # type: ignore[call-overload]
        file.write(b"\x77")


def test_quick_check_finds_a_damaged_btree_page(tmp_path: Path) -> None:
    make_fts_database(tmp_path / "lcm.db", 2_000)
    break_a_btree_page(tmp_path / "lcm.db")
    copy = tmp_path / "copy.db"
    snapshot_database(tmp_path / "lcm.db", copy)  # the online copy carries the damage
    quick = check_database(copy, quick=True)
    assert not quick.ok, quick
    assert not check_database(copy).ok


def test_fts_damage_is_left_to_the_full_check(tmp_path: Path) -> None:
    make_fts_database(tmp_path / "lcm.db", 2_000)
    conn = apsw.Connection(str(tmp_path / "lcm.db"))
    conn.execute("UPDATE messages_fts_content SET c0 = 'words never indexed' WHERE id = 1")
    conn.close()

    quick = check_database(tmp_path / "lcm.db", quick=True)
    assert quick.ok, "every b-tree, FTS5's shadow tables included, is sound"
    assert quick.tables["notes"] == 2_000 and quick.tables["messages_fts_content"] == 2_000
    assert check_database(tmp_path / "lcm.db").integrity == FTS_DAMAGE


def test_an_index_that_disagrees_with_its_table_is_left_to_the_full_check(
    tmp_path: Path,
) -> None:
    make_fts_database(tmp_path / "lcm.db", 2_000)
    conn = apsw.Connection(str(tmp_path / "lcm.db"))
    conn.config(apsw.SQLITE_DBCONFIG_DEFENSIVE, 0)
    conn.execute("PRAGMA writable_schema = ON")
    conn.execute(
        "UPDATE sqlite_schema SET sql = 'CREATE INDEX notes_x ON notes(y)' WHERE name = 'notes_x'"
    )
    conn.close()

    assert check_database(tmp_path / "lcm.db", quick=True).ok
    full = check_database(tmp_path / "lcm.db")
    assert not full.ok and "notes_x" in full.integrity
