"""The SQL of retrieval: every read search and navigation make beyond ``LcmStore``'s own.

Why a module of its own: query parsing, result folding, rank fusion and
navigation work on rows and ids and never hold a connection. Their
statements live here, so a schema change finds them in one place and the
rest of retrieval never reaches into ``store.conn``. Full-text reads take
the connection ``store.searchable()`` returned (the index attached and
caught up once per search); the others read through the store's own.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import apsw

from hermes_runtime.lcm.records import SUMMARY_PREFIX
from hermes_runtime.lcm.store.fulltext import ATTACHED_AS
from hermes_runtime.lcm.store.lcmstore import LcmStore
from hermes_runtime.lcm.store.schema import Row, fetch_all, fetch_one, fetch_value, rows_for_ids
from hermes_runtime.lcm.store.timewindow import IdWindow

# kind -> (FTS5 table, lcm.db table it indexes)
FTS_TABLES = {"message": ("messages_fts", "messages"), "summary": ("summaries_fts", "summaries")}
# kind -> (role, seq, text) expressions over the base table ``b``: one row shape for both
GREP_COLUMNS = {
    "message": ("b.role", "b.seq", "coalesce(b.content, b.content_json, '')"),
    "summary": ("'summary'", "NULL", "b.content"),
}


def term_matches(conn: apsw.Connection, term: str) -> int:
    """How many messages a quoted FTS5 term matches (counting is cheap; ranking is not)."""
    sql = f"SELECT count(*) FROM {ATTACHED_AS}.messages_fts WHERE messages_fts MATCH ?"
    return int(fetch_value(conn, sql, (term,)))


def covered_by(store: LcmStore, message_id: int) -> str | None:
    """The ref of a summary covering the message, if it was folded into one."""
    row = fetch_one(
        store.conn,
        "SELECT summary_id FROM summary_sources WHERE message_id = ? LIMIT 1",
        (message_id,),
    )
    return f"{SUMMARY_PREFIX}{row[0]}" if row else None


def _session_filter(session_id: str | None, column: str) -> tuple[str, list[Any]]:
    return (f"AND {column} = ?", [session_id]) if session_id else ("", [])


def _filters(
    kind: str,
    session_id: str | None,
    window: IdWindow | None,
    alias: str = "b",
    id_column: str = "",
) -> tuple[str, list[Any]]:
    """The session's and the time window's ``AND`` clauses over the base table's rows."""
    where, params = _session_filter(session_id, f"{alias}.session_id")
    if window is not None:
        clause, more = window.sql(kind, alias, id_column)
        where, params = f"{where} {clause}", [*params, *more]
    return where, params


def grep_rows(
    conn: apsw.Connection,
    kind: str,
    query: str,
    session_id: str | None,
    limit: int,
    window: IdWindow | None = None,
) -> list[Row]:
    """Full-text matches of one kind, best first: (id, session, role, seq, created_at, bm25, text).

    ``conn``: ``store.searchable()``. Summaries carry role ``'summary'`` and no seq.
    ``window``: only rows of that time window (filtered before the limit).
    """
    table, base = FTS_TABLES[kind]
    role, seq, text = GREP_COLUMNS[kind]
    where, params = _filters(kind, session_id, window, id_column=f"{table}.rowid")
    return fetch_all(
        conn,
        f"SELECT b.id, b.session_id, {role}, {seq}, b.created_at, bm25({table}), {text} "
        f"FROM {ATTACHED_AS}.{table} JOIN {base} b ON b.id = {table}.rowid "
        f"WHERE {table} MATCH ? {where} ORDER BY bm25({table}) LIMIT ?",
        [query, *params, limit],
    )


def regex_rows(
    store: LcmStore,
    pattern: str,
    session_id: str | None,
    limit: int,
    window: IdWindow | None = None,
) -> list[Row]:
    """Messages matching an RE2 pattern, newest first (``window``: of that time window only).

    Rows: (id, session, role, seq, created_at, first 300 characters, text).
    """
    where, params = _filters("message", session_id, window, "m")
    return fetch_all(
        store.conn,
        "SELECT id, session_id, role, seq, created_at, "
        "substr(coalesce(content, content_json), 1, 300), coalesce(content, content_json) "
        f"FROM messages m WHERE coalesce(content, content_json) REGEXP ? {where} "
        "ORDER BY id DESC LIMIT ?",
        [pattern, *params, limit],
    )


def ranked_ids(
    conn: apsw.Connection,
    kind: str,
    query: str,
    session_id: str | None,
    limit: int,
    window: IdWindow | None = None,
) -> list[tuple[int, float]]:
    """(id, FTS5 rank) of one kind, best first: the ``ORDER BY rank`` path, no text read.

    ``window``: only rows of that time window, filtered in the query, before the limit.
    """
    table, base = FTS_TABLES[kind]
    if session_id is None and window is None:
        sql = (
            f"SELECT rowid, rank FROM {ATTACHED_AS}.{table} WHERE {table} MATCH ? "
            "ORDER BY rank LIMIT ?"
        )
        params: list[Any] = [query, limit]
    else:
        where, values = _filters(kind, session_id, window, id_column="f.rowid")
        sql = (
            f"SELECT f.rowid, f.rank FROM {ATTACHED_AS}.{table} f "
            f"JOIN {base} b ON b.id = f.rowid "
            f"WHERE {table} MATCH ? {where} ORDER BY f.rank LIMIT ?"
        )
        params = [query, *values, limit]
    return [(int(r[0]), float(r[1])) for r in fetch_all(conn, sql, params)]


CONTENT_SELECT = {
    "message": "SELECT id, role, coalesce(content, content_json) FROM messages WHERE id IN",
    "summary": "SELECT id, 'summary', content FROM summaries WHERE id IN",
}


def contents(store: LcmStore, kind: str, ids: Sequence[int]) -> Iterator[Row]:
    """(id, role, text) of many messages or summaries (role ``'summary'`` for summaries)."""
    return rows_for_ids(store.conn, CONTENT_SELECT[kind], ids)


def newest_sessions(store: LcmStore, limit: int, exclude: str | None, scan: int) -> list[str]:
    """Up to ``limit`` sessions by their newest message, newest first, among ``scan`` messages.

    Walks the newest messages backwards (rowid order, no scan of the history).
    """
    found: list[str] = []
    cursor = store.conn.execute("SELECT session_id FROM messages ORDER BY id DESC LIMIT ?", (scan,))
    for (session_id,) in cursor:
        if session_id != exclude and session_id not in found:
            found.append(str(session_id))
            if len(found) == limit:
                break
    return found


def session_span(store: LcmStore, session_id: str) -> Row | None:
    """(first message's time, last message's time, messages, summaries) of a session."""
    return fetch_one(
        store.conn,
        "SELECT (SELECT created_at FROM messages WHERE session_id = ?1 ORDER BY seq LIMIT 1), "
        "(SELECT created_at FROM messages WHERE session_id = ?1 ORDER BY seq DESC LIMIT 1), "
        "(SELECT next_seq - 1 FROM sessions WHERE id = ?1), "
        "(SELECT count(*) FROM summaries WHERE session_id = ?1)",
        (session_id,),
    )


def last_user_message(store: LcmStore, session_id: str) -> Row | None:
    """(id, first 300 characters) of the session's last user message."""
    return fetch_one(
        store.conn,
        "SELECT id, substr(coalesce(content, content_json), 1, 300) FROM messages "
        "WHERE session_id = ? AND role = 'user' ORDER BY seq DESC LIMIT 1",
        (session_id,),
    )
