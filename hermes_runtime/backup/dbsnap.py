"""Consistent copies of live SQLite databases, taken while writers keep committing.

The online backup API copies all pages in ONE step (``step(-1)``): it holds
a read transaction for the duration, which in WAL mode never blocks writers,
and it cannot restart. A stepped backup (``step(N)``, the ``sqlite3`` CLI's
``.backup``) restarts whenever another connection commits, and on a busy
database may never finish. ``VACUUM INTO`` is the alternative method, kept
for the benchmark's comparison.
"""

from __future__ import annotations

import contextlib
import hashlib
import re
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import cast

import apsw

from hermes_runtime.backup.dbsource import DatabaseReplaced, HeldDatabase
from hermes_runtime.common.backoff import Backoff
from hermes_runtime.common.errors import RuntimeFailure
from hermes_runtime.common.sqlite import connect

METHODS = ("backup", "vacuum")
BUSY_ERRORS = (apsw.BusyError, apsw.LockedError)
BUSY_BACKOFF = Backoff(first=0.25, cap=4.0)  # between tries of a copy that met a lock
MMAP_LIMIT = 1 << 40  # SQLite caps it at its compile-time maximum (2 GiB by default)
COPY_BUSY_TIMEOUT_MS = 30_000
VIRTUAL_TABLE = re.compile(r"CREATE\s+VIRTUAL\s+TABLE\s.*?\bUSING\s+(\w+)", re.I | re.S)


@dataclass(frozen=True)
class DatabaseCheck:
    """What ``PRAGMA integrity_check`` (or ``quick_check``) and a row count per table found."""

    integrity: str
    tables: dict[str, int]

    @property
    def ok(self) -> bool:
        return self.integrity == "ok"


def snapshot_database(
    source: Path | HeldDatabase,
    dest: Path,
    *,
    method: str = "backup",
    attempts: int = 5,
    busy_timeout_ms: int = 2000,
) -> float:
    """Copy ``source`` into the new file ``dest``; return the seconds it took.

    Retries a bounded number of times when the database stays locked (a
    rollback-journal writer, a WAL recovery) or another file took its name while it was
    copied, then fails naming the file. A ``HeldDatabase`` is the data dir's: read through
    its held folder (``dbsource`` says what guards what); a ``Path`` is read as it names.
    """
    if method not in METHODS:
        raise ValueError(f"unknown snapshot method {method!r}")
    last_error: Exception | None = None
    for attempt in range(attempts):
        with contextlib.suppress(FileNotFoundError):
            dest.unlink()
        started = time.monotonic()
        try:
            _copy_once(source, dest, method, busy_timeout_ms)
            return time.monotonic() - started
        except (*BUSY_ERRORS, DatabaseReplaced) as exc:
            last_error = exc
            if attempt + 1 < attempts:  # no wait after the last try: it fails at once
                time.sleep(BUSY_BACKOFF.delay(attempt))
        except apsw.FullError as exc:
            raise RuntimeFailure(
                f"database {source}: snapshot into {dest} failed: disk full "
                f"(No space left on device in {dest.parent})"
            ) from exc
        except apsw.Error as exc:
            raise RuntimeFailure(
                f"database {source}: snapshot into {dest} failed: {type(exc).__name__}: {exc}"
            ) from exc
    if isinstance(last_error, DatabaseReplaced):
        raise RuntimeFailure(f"database {source}: {last_error} ({attempts} attempts)")
    raise RuntimeFailure(
        f"database {source}: still locked after {attempts} attempts ({last_error}); "
        "is a process holding an exclusive lock?"
    )


def _copy_once(source: Path | HeldDatabase, dest: Path, method: str, busy_timeout_ms: int) -> None:
    if not isinstance(source, HeldDatabase):
        src = connect(source, readonly=True, busy_timeout_ms=busy_timeout_ms)
        try:
            _copy_from(src, dest, method)
        finally:
            src.close()
        return
    identity = source.identity()
    rest = source.rest_state()
    src = source.connect(busy_timeout_ms, at_rest=rest is not None)
    try:
        _copy_from(src, dest, method)
    finally:
        src.close()
    source.require_same(identity)
    if rest is not None:
        source.require_rest(rest)


def _copy_from(src: apsw.Connection, dest: Path, method: str) -> None:
    if method == "vacuum":
        src.execute("VACUUM INTO ?", (str(dest),))
        return
    dst = apsw.Connection(str(dest))
    # A scratch copy: durability comes later, when its compressed body is uploaded.
    dst.execute("PRAGMA journal_mode = OFF")
    dst.execute("PRAGMA synchronous = OFF")
    try:
        with dst.backup("main", src, "main") as backup:
            backup.step(-1)
    finally:
        dst.close()


def _load_vector_extension(conn: apsw.Connection) -> None:
    """Let checks read databases whose schema uses sqlite-vec's ``vec0`` tables."""
    with contextlib.suppress(Exception):
        import sqlite_vec

        conn.enable_load_extension(True)
        conn.load_extension(sqlite_vec.loadable_path())
        conn.enable_load_extension(False)


def file_sha256(path: Path) -> str:
    """The file's SHA-256, hex.

    Why: ``create`` records it beside the ``integrity_check`` of the same bytes, so a
    restore whose joined file hashes the same holds exactly the copy that was checked, and
    hashing it costs a fraction of what a second check would.
    """
    with path.open("rb") as file:
        return hashlib.file_digest(file, "sha256").hexdigest()


def check_and_hash(path: Path) -> tuple[DatabaseCheck, str]:
    """``check_database(quick=True)`` and ``file_sha256`` of one private copy, side by side.

    What ``create`` runs on each copy. Both release the GIL (SQLite, hashlib on large
    buffers), so on two cores the hash costs no extra wall time.
    """
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="sha256") as pool:
        digest = pool.submit(file_sha256, path)
        check = check_database(path, quick=True)
        return check, digest.result()


def check_database(path: Path, *, quick: bool = False) -> DatabaseCheck:
    """Run ``integrity_check`` (``quick``: ``quick_check``) and count rows of every table.

    ``quick`` is ``create``'s check: ``PRAGMA quick_check`` of every b-tree (every page,
    FTS5's shadow tables included: they are ordinary tables), without the virtual tables' own
    checks. SQLite runs those inside both pragmas since 3.44, and FTS5's ignores "quick" and
    re-tokenises every row, most of the time a ``quick_check`` of an LCM database takes.
    The full ``integrity_check``, theirs included, is ``verify``'s, on a restored copy.

    ``path`` is always a private copy (a snapshot, a restored or verified
    blob), never a live database, so it is read through mmap: pages are
    used in place instead of copied into SQLite's cache, which makes the
    check cost several times less CPU. A live file is not mmapped: another
    process truncating it would SIGBUS us.
    """
    try:
        conn = _open_copy(path)
    except apsw.Error as exc:
        return DatabaseCheck(f"cannot open: {exc}", {})
    try:
        if quick:
            _leave_out_virtual_table_checks(conn)
        else:
            _load_vector_extension(conn)
        pragma = "quick_check" if quick else "integrity_check"
        problems = [str(row[0]) for row in conn.execute(f"PRAGMA {pragma}")]
        integrity = "ok" if problems == ["ok"] else "; ".join(problems[:5])
        tables: dict[str, int] = {}
        names = conn.execute(
            "SELECT name FROM sqlite_schema WHERE type = 'table' "
            "AND sql NOT LIKE 'CREATE VIRTUAL%' ORDER BY name"
        ).fetchall()
        for (name,) in names:
            count = conn.execute(f"SELECT count(*) FROM {_quoted(str(name))}").fetchall()[0][0]
            tables[str(name)] = int(count)  # type: ignore[arg-type]
        return DatabaseCheck(integrity, tables)
    except apsw.Error as exc:
        return DatabaseCheck(f"check failed: {exc}", {})
    finally:
        conn.close()


def _open_copy(path: Path) -> apsw.Connection:
    """A read-only connection to a private copy, waiting out another's WAL recovery.

    A copy of a WAL database is a WAL database without its ``-shm``: the first connection
    to read it recovers the WAL index, and a second one opening meanwhile would otherwise
    get "database is locked".
    """
    conn = apsw.Connection(str(path), flags=apsw.SQLITE_OPEN_READONLY)
    conn.set_busy_timeout(COPY_BUSY_TIMEOUT_MS)
    conn.execute(f"PRAGMA mmap_size = {MMAP_LIMIT}")
    return conn


def _quoted(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


class _Unchecked:
    """A stand-in module for a virtual table: it connects, and has no integrity method.

    Registered under the table's module name on the checking connection only, it replaces
    the real module there (SQLite keeps the last one registered), so ``integrity_check``
    checks every b-tree and skips that table's own check (a module before version 4 has none).
    """

    def Connect(self, *_args: object) -> tuple[str, object]:
        return "CREATE TABLE x(unused)", _UncheckedTable()

    Create = Connect


class _UncheckedTable:
    def BestIndex(self, *_args: object) -> None:
        return None

    def Open(self) -> object:
        raise apsw.SQLError("not readable while its pages are being checked")

    def Disconnect(self) -> None:
        return None

    Destroy = Disconnect


def _leave_out_virtual_table_checks(conn: apsw.Connection) -> None:
    modules = {
        match.group(1).lower()
        for (sql,) in conn.execute(
            "SELECT sql FROM sqlite_schema WHERE sql LIKE 'CREATE VIRTUAL TABLE%'"
        ).fetchall()
        if (match := VIRTUAL_TABLE.match(str(sql)))
    }
    for module in sorted(modules):
        conn.create_module(module, cast("apsw.VTModule", _Unchecked()))
