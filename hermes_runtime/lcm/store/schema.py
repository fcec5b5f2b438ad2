"""Versioned migrations for the LCM database.

Why versioned: the database lives for the agent's whole life (months) and is
restored from backups made by older releases, so every schema change is a
numbered step applied once, in a transaction, recorded in ``user_version``.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterator, Sequence
from typing import Any

import apsw

from hermes_runtime.common.errors import RuntimeFailure

MIGRATIONS: tuple[str, ...] = (
    # 1: the normalized core.
    """
    CREATE TABLE sessions (
        id          TEXT PRIMARY KEY,
        created_at  REAL NOT NULL,
        next_seq    INTEGER NOT NULL DEFAULT 1,
        next_pos    INTEGER NOT NULL DEFAULT 1,
        host_state  TEXT
    );
    CREATE TABLE outputs (
        id          TEXT PRIMARY KEY,
        sha256      TEXT NOT NULL UNIQUE,
        size        INTEGER NOT NULL,
        encoding    TEXT NOT NULL CHECK (encoding IN ('text', 'json')),
        relpath     TEXT NOT NULL,
        created_at  REAL NOT NULL
    );
    CREATE TABLE messages (
        id           INTEGER PRIMARY KEY,
        session_id   TEXT NOT NULL REFERENCES sessions(id),
        seq          INTEGER NOT NULL,
        role         TEXT NOT NULL,
        content      TEXT,
        content_json TEXT,
        tool_calls   TEXT,
        tool_call_id TEXT,
        name         TEXT,
        extra        TEXT,
        output_id    TEXT REFERENCES outputs(id),
        token_count  INTEGER NOT NULL,
        created_at   REAL NOT NULL,
        UNIQUE (session_id, seq)
    );
    CREATE TABLE summaries (
        id          INTEGER PRIMARY KEY,
        session_id  TEXT NOT NULL REFERENCES sessions(id),
        depth       INTEGER NOT NULL,
        content     TEXT NOT NULL,
        token_count INTEGER NOT NULL,
        source_tokens INTEGER NOT NULL,
        level       INTEGER NOT NULL,
        first_seq   INTEGER NOT NULL,
        last_seq    INTEGER NOT NULL,
        start_at    REAL NOT NULL,
        end_at      REAL NOT NULL,
        message_count INTEGER NOT NULL,
        created_at  REAL NOT NULL
    );
    CREATE INDEX summaries_session ON summaries(session_id, depth);
    CREATE TABLE summary_sources (
        summary_id  INTEGER NOT NULL REFERENCES summaries(id),
        ord         INTEGER NOT NULL,
        message_id  INTEGER REFERENCES messages(id),
        child_id    INTEGER REFERENCES summaries(id),
        PRIMARY KEY (summary_id, ord),
        CHECK ((message_id IS NULL) <> (child_id IS NULL))
    ) WITHOUT ROWID;
    CREATE INDEX summary_sources_message ON summary_sources(message_id)
        WHERE message_id IS NOT NULL;
    CREATE INDEX summary_sources_child ON summary_sources(child_id) WHERE child_id IS NOT NULL;
    CREATE TABLE context_items (
        session_id  TEXT NOT NULL REFERENCES sessions(id),
        position    INTEGER NOT NULL,
        message_id  INTEGER REFERENCES messages(id),
        summary_id  INTEGER REFERENCES summaries(id),
        PRIMARY KEY (session_id, position),
        CHECK ((message_id IS NULL) <> (summary_id IS NULL))
    ) WITHOUT ROWID;
    CREATE TABLE embeddings (
        id          INTEGER PRIMARY KEY,
        kind        TEXT NOT NULL CHECK (kind IN ('message', 'summary')),
        item_id     INTEGER NOT NULL,
        model       TEXT NOT NULL,
        dim         INTEGER NOT NULL,
        session_id  TEXT NOT NULL,
        vector      BLOB NOT NULL,
        UNIQUE (model, kind, item_id)
    );
    CREATE TABLE embed_queue (
        id          INTEGER PRIMARY KEY,
        kind        TEXT NOT NULL,
        item_id     INTEGER NOT NULL
    );
    CREATE VIRTUAL TABLE messages_fts USING fts5(
        content, content='messages', content_rowid='id',
        tokenize='porter unicode61 remove_diacritics 2'
    );
    CREATE VIRTUAL TABLE summaries_fts USING fts5(
        content, content='summaries', content_rowid='id',
        tokenize='porter unicode61 remove_diacritics 2'
    );
    CREATE TRIGGER messages_ai AFTER INSERT ON messages BEGIN
        INSERT INTO messages_fts(rowid, content)
            VALUES (new.id, coalesce(new.content, new.content_json, ''));
    END;
    CREATE TRIGGER summaries_ai AFTER INSERT ON summaries BEGIN
        INSERT INTO summaries_fts(rowid, content) VALUES (new.id, new.content);
    END;
    CREATE TRIGGER messages_no_update BEFORE UPDATE ON messages BEGIN
        SELECT RAISE(ABORT, 'LCM messages are immutable');
    END;
    CREATE TRIGGER messages_no_delete BEFORE DELETE ON messages BEGIN
        SELECT RAISE(ABORT, 'LCM messages are immutable');
    END;
    """,
    # 2: which LCM session holds each host (Hermes) session id. Hermes rotates
    # its id at compaction and the gateway restarts (pod restart, plugin reload,
    # secret rotation): the binding must outlive the process, or a continuing
    # conversation would start a second LCM session without its history.
    """
    CREATE TABLE IF NOT EXISTS host_sessions (
        host_session_id TEXT PRIMARY KEY,
        lcm_session_id  TEXT NOT NULL REFERENCES sessions(id),
        bound_at        REAL NOT NULL
    ) WITHOUT ROWID;
    CREATE INDEX IF NOT EXISTS host_sessions_lcm ON host_sessions(lcm_session_id);
    """,
    # 3: a session exists once a message is stored. Binding a host id no
    # longer creates the LCM session, so the binding cannot reference it;
    # the empty sessions earlier releases created (one per Hermes review
    # fork and API request) are dropped.
    """
    CREATE TABLE host_sessions_v3 (
        host_session_id TEXT PRIMARY KEY,
        lcm_session_id  TEXT NOT NULL,
        bound_at        REAL NOT NULL
    ) WITHOUT ROWID;
    INSERT INTO host_sessions_v3 SELECT host_session_id, lcm_session_id, bound_at
        FROM host_sessions WHERE host_session_id <> lcm_session_id;
    DROP TABLE host_sessions;
    ALTER TABLE host_sessions_v3 RENAME TO host_sessions;
    CREATE INDEX host_sessions_lcm ON host_sessions(lcm_session_id);
    DELETE FROM sessions WHERE next_seq = 1
        AND NOT EXISTS (SELECT 1 FROM messages m WHERE m.session_id = sessions.id)
        AND NOT EXISTS (SELECT 1 FROM summaries s WHERE s.session_id = sessions.id)
        AND NOT EXISTS (SELECT 1 FROM context_items c WHERE c.session_id = sessions.id);
    """,
    # 4: the full-text postings move to their own file, written off the turn's path
    # (fulltext.py); the store indexes lcm.db there when it opens it for writing.
    """
    DROP TRIGGER IF EXISTS messages_ai;
    DROP TRIGGER IF EXISTS summaries_ai;
    DROP TABLE IF EXISTS messages_fts;
    DROP TABLE IF EXISTS summaries_fts;
    """,
)


# Tables every LCM schema (version 1 on) has: what tells our database from another one.
LCM_TABLES = frozenset(
    {"sessions", "messages", "summaries", "summary_sources", "context_items", "outputs"}
)


class NotAnLcmDatabase(RuntimeFailure):
    """The file is a SQLite database of something else (Hermes' state.db, say): never touch it."""


class LcmVolumeRefused(RuntimeFailure):
    """The volume refused what reading the database needs: the file says nothing of its kind.

    Opening a WAL database creates its ``-shm`` (and ``-wal``) file when they are gone (a
    clean close removes them), so on a full or read-only data volume the first read fails
    with an I/O error. Reported as a foreign or damaged file, that sent an operator after a
    restore the database did not need; the fix is space on the volume.
    """


# SQLite's answers that are the volume's, not the file's (a full, read-only or failing disk).
VOLUME_ERRORS: tuple[type[apsw.Error], ...] = (
    apsw.FullError,
    apsw.IOError,
    apsw.CantOpenError,
    apsw.ReadOnlyError,
)


def volume_state(path: object) -> str:
    """What the volume of ``path``'s folder is like: read-only, or its free bytes."""
    folder = os.path.dirname(os.path.abspath(str(path)))
    try:
        stats = os.statvfs(folder)
    except OSError as exc:
        return f"the state of {folder} is unknown: {exc.strerror}"
    if stats.f_flag & os.ST_RDONLY:
        return "its volume is mounted read-only"
    return f"{stats.f_bavail * stats.f_frsize} bytes free on its volume"


class NewerLcmSchema(RuntimeFailure):
    """The database was written by a newer release: reading or migrating it could corrupt it."""


def schema_version(conn: apsw.Connection) -> int:
    row = conn.execute("PRAGMA user_version").fetchone()
    return int(row[0]) if row else 0


def check_lcm_database(conn: apsw.Connection, path: object, allow_empty: bool) -> int:
    """The LCM schema version of ``conn``'s database, or an error naming ``path``.

    Runs before anything else touches the file (no write, no journal-mode
    change), so a foreign database is left byte for byte as it was. An empty
    database (no table at all) is 0 and accepted only with ``allow_empty``:
    only the engine and ``lcm import`` create the schema, only there.
    """
    try:
        # One statement, one snapshot: read apart, a process creating the schema between
        # the two reads made a fresh file look like a foreign one (no tables, a version).
        row = conn.execute(
            "SELECT json_group_array(name), (SELECT user_version FROM pragma_user_version) "
            "FROM sqlite_schema"
        ).fetchone()
        assert row is not None  # an aggregate always answers one row
        tables, version = {str(name) for name in json.loads(row[0])}, int(row[1])
    except VOLUME_ERRORS as exc:
        raise LcmVolumeRefused(
            f"{path}: the volume refused what opening the database needs ({exc}; "
            f"{volume_state(path)}): a full or read-only data volume, not a damaged file; "
            "make room or make it writable, then start again (the file was not changed)"
        ) from exc
    except apsw.Error as exc:
        raise NotAnLcmDatabase(f"{path}: not a readable SQLite database: {exc}") from exc
    if not tables and version == 0:
        if allow_empty:
            return 0
        raise NotAnLcmDatabase(f"{path}: empty database, no LCM schema (create it with lcm import)")
    if version == 0 or not tables >= LCM_TABLES:
        missing = ", ".join(sorted(LCM_TABLES - tables)) or "user_version"
        raise NotAnLcmDatabase(
            f"{path}: not an LCM database (no LCM schema: {missing} missing); left untouched"
        )
    if version > len(MIGRATIONS):
        raise NewerLcmSchema(
            f"{path}: LCM schema version {version} is newer than this release knows "
            f"({len(MIGRATIONS)}); upgrade hermes-runtime"
        )
    return version


def migrate(conn: apsw.Connection) -> int:
    """Apply every migration newer than the database, each in its own transaction.

    The version is read again under the write lock: processes starting at once
    on a fresh file all see version 0, and only the first may apply a step
    (the others would fail on "table sessions already exists").
    """
    while True:
        current = _known_version(conn)
        if current == len(MIGRATIONS):
            return current
        with write_transaction(conn):
            current = _known_version(conn)
            if current < len(MIGRATIONS):
                conn.execute(MIGRATIONS[current])
                conn.execute(f"PRAGMA user_version = {current + 1}")


def _known_version(conn: apsw.Connection) -> int:
    current = schema_version(conn)
    if current > len(MIGRATIONS):
        raise NewerLcmSchema(
            f"LCM schema version {current} is newer than this release knows "
            f"({len(MIGRATIONS)}); upgrade hermes-runtime"
        )
    return current


@contextlib.contextmanager
def write_transaction(conn: apsw.Connection) -> Iterator[None]:
    """``BEGIN IMMEDIATE`` ... ``COMMIT``: take the write lock up front.

    A deferred transaction that reads and then writes must upgrade its lock
    and fails with "database is locked" when another writer got there first
    (the busy handler cannot help a deadlock); taking the lock at BEGIN lets
    the busy timeout queue writers instead.
    """
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")


Row = tuple[Any, ...]


def fetch_one(conn: apsw.Connection, sql: str, params: Any = ()) -> Row | None:
    """First row or None, typed loosely: apsw's own stubs type every cell as a union."""
    row = conn.execute(sql, params).fetchone()
    return tuple(row) if row is not None else None


def fetch_all(conn: apsw.Connection, sql: str, params: Any = ()) -> list[Row]:
    return [tuple(row) for row in conn.execute(sql, params)]


def fetch_value(conn: apsw.Connection, sql: str, params: Any = ()) -> Any:
    row = fetch_one(conn, sql, params)
    return row[0] if row else None


# Ids bound in one ``IN (...)``, well under SQLite's variable limit.
IDS_A_QUERY = 500


def rows_for_ids(
    conn: apsw.Connection, select: str, ids: Sequence[int], params: Sequence[Any] = ()
) -> Iterator[Row]:
    """Rows of ``select`` (ending ``... IN``) for many ids, ``IDS_A_QUERY`` ids a query."""
    for start in range(0, len(ids), IDS_A_QUERY):
        chunk = list(ids[start : start + IDS_A_QUERY])
        marks = ",".join("?" * len(chunk))
        yield from fetch_all(conn, f"{select} ({marks})", [*params, *chunk])
