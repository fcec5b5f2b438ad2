"""One way to open SQLite in this project: apsw with a bundled, recent SQLite.

The standard ``sqlite3`` module links whatever the system ships (3.40 on
Debian bookworm), which predates the WAL-reset corruption fix of 3.51.3.
apsw bundles its own SQLite, so LCM and backup never depend on the host.
"""

from __future__ import annotations

import time
from pathlib import Path

import apsw

from hermes_runtime.common.groupaccess import create_shared

MIN_SQLITE_VERSION = (3, 51, 3)
# Prepared statements apsw keeps per connection (its default is 100). Its cache is a
# ring: every statement run goes back in at the next slot and pushes out the oldest, so a
# statement stays compiled only while it runs again within that many statements. A
# compaction in the LCM engine loop runs about as many as the default holds, so with the
# default many of its statements would be compiled anew every time (bench/lcm_engine_loop.py).
# The cost is memory, SQLite's own and small: most of it on the connection that stores
# messages (its multi-row INSERT texts, one for each batch size).
STATEMENT_CACHE_SIZE = 256


def sqlite_version() -> tuple[int, ...]:
    return tuple(int(part) for part in apsw.sqlite_lib_version().split("."))


def require_safe_sqlite() -> None:
    if sqlite_version() < MIN_SQLITE_VERSION:
        raise RuntimeError(
            f"SQLite {apsw.sqlite_lib_version()} is older than 3.51.3, which fixes the "
            "WAL-reset corruption bug; install a newer apsw"
        )


def connect(
    path: Path | str,
    *,
    readonly: bool = False,
    busy_timeout_ms: int = 5000,
    wal: bool = True,
    uri: bool = False,
) -> apsw.Connection:
    """Open a connection with the project's defaults (WAL, foreign keys, busy timeout).

    ``uri``: ``ATTACH`` takes ``file:`` URIs (``?mode=ro``: attach read-only). A writable
    ``path`` that is a file name, not a ``file:`` URI, is created group-writable when new,
    with ``uri`` too (LCM opens its databases so): otherwise SQLite makes it 0644 and the
    replication sidecar, another UID, cannot replicate it until the agent restarts.
    """
    require_safe_sqlite()
    flags = (
        apsw.SQLITE_OPEN_READONLY
        if readonly
        else apsw.SQLITE_OPEN_READWRITE | apsw.SQLITE_OPEN_CREATE
    )
    if uri:
        flags |= apsw.SQLITE_OPEN_URI
    if not readonly and not str(path).startswith("file:"):
        create_shared(path)  # a new database group-writable, for replicate (groupaccess)
    conn = apsw.Connection(str(path), flags=flags, statementcachesize=STATEMENT_CACHE_SIZE)
    conn.set_busy_timeout(busy_timeout_ms)
    conn.execute("PRAGMA foreign_keys = ON")
    if wal and not readonly:
        enable_wal(conn, busy_timeout_ms / 1000)
    return conn


def enable_wal(conn: apsw.Connection, timeout_seconds: float) -> None:
    """WAL and NORMAL sync, waiting up to ``timeout_seconds`` for other processes.

    The switch needs the database to itself for a moment. While another connection is in a
    write transaction (a process creating the schema of a new database), SQLite answers
    "database is locked" at once instead of waiting on the busy timeout: it skips the busy
    handler where waiting could deadlock. So the switch is retried here. Seen with four
    engines, two imports, a reader and a backup starting at once on a new LCM database.
    """
    deadline = time.monotonic() + timeout_seconds
    while True:
        try:
            conn.execute("PRAGMA journal_mode = WAL")
            break
        except apsw.BusyError:
            if time.monotonic() >= deadline:
                raise
            time.sleep(0.02)
    conn.execute("PRAGMA synchronous = NORMAL")
