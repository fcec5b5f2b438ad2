"""Switching a database to WAL while another connection writes to it (real SQLite via apsw).

SQLite answers "database is locked" at once, busy timeout or not, when a connection asks for
WAL while another holds a write transaction; ``enable_wal`` waits that out.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import apsw
import pytest

from hermes_runtime.common.sqlite import enable_wal


def writer_holding_a_transaction(db: Path, release: threading.Event) -> threading.Thread:
    """Another connection in a write transaction on ``db``, committed once ``release`` is set."""
    writer = apsw.Connection(str(db))
    writer.execute("BEGIN IMMEDIATE")
    writer.execute("INSERT INTO t VALUES (1)")

    def commit_when_released() -> None:
        release.wait(30)
        writer.execute("COMMIT")
        writer.close()

    thread = threading.Thread(target=commit_when_released)
    thread.start()
    return thread


@pytest.fixture
def new_database(tmp_path: Path) -> Path:
    db = tmp_path / "new.db"
    conn = apsw.Connection(str(db))
    conn.execute("CREATE TABLE t (x)")
    conn.close()
    return db


def test_the_busy_timeout_alone_does_not_wait_for_a_writer(new_database: Path) -> None:
    """The situation ``enable_wal`` exists for: without it, the switch fails at once."""
    release = threading.Event()
    thread = writer_holding_a_transaction(new_database, release)
    conn = apsw.Connection(str(new_database))
    conn.set_busy_timeout(10_000)
    started = time.monotonic()
    with pytest.raises(apsw.BusyError):
        conn.execute("PRAGMA journal_mode = WAL")
    assert time.monotonic() - started < 5  # refused, not waited for the 10 s busy timeout
    release.set()
    thread.join()


def test_enable_wal_waits_for_the_writer_and_switches(new_database: Path) -> None:
    release = threading.Event()
    thread = writer_holding_a_transaction(new_database, release)
    threading.Timer(0.5, release.set).start()
    conn = apsw.Connection(str(new_database))
    conn.set_busy_timeout(5000)
    enable_wal(conn, timeout_seconds=30)
    thread.join()
    assert conn.execute("PRAGMA journal_mode").fetchall() == [("wal",)]
    assert conn.execute("PRAGMA synchronous").fetchall() == [(1,)]  # NORMAL
    assert conn.execute("SELECT x FROM t").fetchall() == [(1,)]  # the writer's row is there


def test_enable_wal_gives_up_after_its_timeout(new_database: Path) -> None:
    release = threading.Event()
    thread = writer_holding_a_transaction(new_database, release)
    conn = apsw.Connection(str(new_database))
    try:
        with pytest.raises(apsw.BusyError):  # the writer never commits meanwhile
            enable_wal(conn, timeout_seconds=0.3)
    finally:
        release.set()
        thread.join()
