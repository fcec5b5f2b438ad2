"""One way to open SQLite in this project: apsw with a bundled, recent SQLite.

The standard ``sqlite3`` module links whatever the system ships (3.40 on
Debian bookworm), which predates the WAL-reset corruption fix of 3.51.3.
apsw bundles its own SQLite, so LCM and backup never depend on the host.
"""

from __future__ import annotations

from pathlib import Path

import apsw

MIN_SQLITE_VERSION = (3, 51, 3)


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
) -> apsw.Connection:
    """Open a connection with the project's defaults (WAL, foreign keys, busy timeout)."""
    require_safe_sqlite()
    flags = (
        apsw.SQLITE_OPEN_READONLY
        if readonly
        else apsw.SQLITE_OPEN_READWRITE | apsw.SQLITE_OPEN_CREATE
    )
    conn = apsw.Connection(str(path), flags=flags)
    conn.set_busy_timeout(busy_timeout_ms)
    conn.execute("PRAGMA foreign_keys = ON")
    if wal and not readonly:
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("PRAGMA synchronous = NORMAL")
    return conn
