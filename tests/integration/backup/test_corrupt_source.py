"""A database whose snapshot fails ``quick_check`` never leaves the machine.

The check runs on the staged snapshot before restic sees the tree, so a database with a
damaged b-tree page leaves nothing in the repository (not even a repository), and the error
names the file. Damage ``quick_check`` does not look at (an index that disagrees with its
table, an FTS5 index that no longer matches its text) is ``verify``'s: test_checks.py.
"""

from __future__ import annotations

from pathlib import Path

import apsw
from backup_testlib import BackupTarget, make_database, run_cli


def make_damaged_page(path: Path, rows: int) -> None:
    """A database whose table's root page has a type no b-tree page has: quick_check finds it.

    The online backup API copies pages as they are, so the snapshot carries the damage just
    as a real corrupted file would.
    """
    conn = apsw.Connection(str(path))
    conn.execute("CREATE TABLE t(x INTEGER, y INTEGER)")
    with conn:
        conn.executemany("INSERT INTO t VALUES (?, ?)", ((i, -i) for i in range(rows)))
    ((root,),) = conn.execute("SELECT rootpage FROM sqlite_schema WHERE name = 't'")
    ((page_size,),) = conn.execute("PRAGMA page_size")
    conn.close()
    with path.open("r+b") as file:
        file.seek((int(root) - 1) * int(page_size))  # type: ignore[call-overload]
        file.write(b"\x77")


def test_a_database_failing_quick_check_is_not_uploaded(
    target: BackupTarget, tmp_path: Path
) -> None:
    data = tmp_path / "data"
    data.mkdir()
    make_damaged_page(data / "lcm.db", 200_000)  # several MB: more than one chunk
    check = apsw.Connection(str(data / "lcm.db")).execute("PRAGMA quick_check").fetchall()
    assert check != [("ok",)]

    result = run_cli("create", "--data-dir", str(data), "--target", target.url, env=target.env)
    assert result.returncode == 1
    assert str(data / "lcm.db") in result.stderr and "quick_check" in result.stderr
    assert target.object_keys() == []  # restic never ran: no pack, no snapshot
    listed = run_cli("list", "--target", target.url, "--json", env=target.env)
    assert listed.returncode == 0 and listed.stdout.strip() == "[]"


def test_the_same_flow_uploads_a_sound_database(target: BackupTarget, tmp_path: Path) -> None:
    """Control for the test above: the same flow uploads a healthy database."""
    data = tmp_path / "data"
    make_database(data / "lcm.db", 20_000)
    result = run_cli("create", "--data-dir", str(data), "--target", target.url, env=target.env)
    assert result.returncode == 0, result.stderr
    assert any(k.startswith("data/") for k in target.object_keys())  # restic's pack files
