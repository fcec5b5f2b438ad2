"""Summaries, their sources (the DAG) and the live context: the SQL, in one place.

Why a module of its own: compaction swaps a run of context items for one
summary (``replace_run``) and assembly, navigation and the sync read the
DAG back; none of it goes through the store's turn write path (summaries are
never queued), only through its connection and write transaction.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import apsw

from hermes_runtime.lcm.records import ContextItem, StoredMessage, Summary
from hermes_runtime.lcm.store.messagereads import MESSAGE_COLUMNS, message
from hermes_runtime.lcm.store.schema import fetch_all, fetch_one, fetch_value

if TYPE_CHECKING:
    from hermes_runtime.lcm.store.lcmstore import LcmStore

SUMMARY_COLUMNS = (
    "id, session_id, depth, content, token_count, source_tokens, level, first_seq, last_seq, "
    "start_at, end_at, message_count, created_at"
)


@dataclass(frozen=True)
class NewSummary:
    """A summary about to replace a run of context items."""

    depth: int
    content: str
    token_count: int
    source_tokens: int
    level: int
    sources: list[tuple[str, int]]  # ("message" | "summary", id), in order


def summary(store: LcmStore, summary_id: int) -> Summary | None:
    row = fetch_one(  # summaries are never queued: no flush (the turn hook reads them)
        store.db.connection(),
        f"SELECT {SUMMARY_COLUMNS} FROM summaries WHERE id = ?",
        (summary_id,),
    )
    return Summary(*row) if row else None


def summary_sessions(store: LcmStore, summary_ids: Sequence[int]) -> dict[int, str]:
    """The session of each of these summaries that exists (one query, no content read)."""
    rows = fetch_all(  # summaries are never queued: no flush
        store.db.connection(),
        "SELECT id, session_id FROM summaries WHERE id IN (SELECT value FROM json_each(?))",
        (json.dumps([int(i) for i in summary_ids]),),
    )
    return {int(r[0]): str(r[1]) for r in rows}


def summary_sources(
    store: LcmStore, summary_id: int, offset: int = 0, limit: int = 1000
) -> list[StoredMessage | Summary]:
    rows = fetch_all(
        store.conn,
        "SELECT message_id, child_id FROM summary_sources WHERE summary_id = ? "
        "ORDER BY ord LIMIT ? OFFSET ?",
        (summary_id, limit, offset),
    )
    result: list[StoredMessage | Summary] = []
    for message_id, child_id in rows:
        item = (
            message(store, int(message_id))
            if message_id is not None
            else summary(store, int(child_id))
        )
        assert item is not None, "foreign keys guarantee the source exists"
        result.append(item)
    return result


def summary_source_count(store: LcmStore, summary_id: int) -> int:
    return int(
        fetch_value(
            store.conn,
            "SELECT count(*) FROM summary_sources WHERE summary_id = ?",
            (summary_id,),
        )
    )


def context_items(store: LcmStore, session_id: str) -> list[ContextItem]:
    """The live context in order, in one statement (no N+1, one snapshot).

    Messages and summaries are read by two joins merged in position order
    (``UNION ALL``: both halves come ordered from the primary key, so SQLite
    merges them without a sort) rather than one row carrying both tables'
    columns: half the columns a row, no slicing, and each record built from
    its half as it is. Every compaction reads it (``compaction.compact``), so
    the cheaper shape counts. (The two halves must keep the same column count,
    SQLite refuses the statement otherwise.)
    """
    rows = store.conn.execute(
        f"SELECT c.position, 0, {_prefixed('m', MESSAGE_COLUMNS)} FROM context_items c "
        "JOIN messages m ON m.id = c.message_id WHERE c.session_id = ? "
        f"UNION ALL SELECT c.position, 1, {_prefixed('s', SUMMARY_COLUMNS)} "
        "FROM context_items c JOIN summaries s ON s.id = c.summary_id WHERE c.session_id = ? "
        "ORDER BY 1",
        (session_id, session_id),
    )
    return [
        ContextItem(row[0], StoredMessage._make(row[2:]))
        if row[1] == 0
        else ContextItem(row[0], summary=Summary._make(row[2:]))
        for row in rows
    ]


def replace_run(
    store: LcmStore, session_id: str, positions: Sequence[int], new: NewSummary
) -> Summary | None:
    """Swap a run of context items for one summary, atomically.

    Returns None (and changes nothing) when the run is no longer in the
    context, e.g. another engine compacted the same span meanwhile: the
    positions must still hold exactly ``new.sources``, in order (a count
    alone missed a summary put at the run's only or last position).
    """
    if not positions:
        return None
    expected = [
        (ident, None) if kind == "message" else (None, ident) for kind, ident in new.sources
    ]
    with store.writing() as conn:
        held = [
            (row[0], row[1])
            for row in conn.execute(
                "SELECT message_id, summary_id FROM context_items WHERE session_id = ? "
                "AND position BETWEEN ? AND ? ORDER BY position",
                (session_id, positions[0], positions[-1]),
            )
        ]
        if held != expected:
            return None
        span = _span(conn, new.sources)
        now = time.time()
        values = (
            session_id,
            new.depth,
            new.content,
            new.token_count,
            new.source_tokens,
            new.level,
            *span,
            now,
        )
        conn.execute(
            "INSERT INTO summaries(session_id, depth, content, token_count, source_tokens, "
            "level, first_seq, last_seq, start_at, end_at, message_count, created_at) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            values,
        )
        summary_id = conn.last_insert_rowid()
        conn.executemany(
            "INSERT INTO summary_sources(summary_id, ord, message_id, child_id) "
            "VALUES (?, ?, ?, ?)",
            [
                (
                    summary_id,
                    i,
                    ident if kind == "message" else None,
                    ident if kind == "summary" else None,
                )
                for i, (kind, ident) in enumerate(new.sources)
            ],
        )
        conn.execute(
            "DELETE FROM context_items WHERE session_id = ? AND position BETWEEN ? AND ?",
            (session_id, positions[0], positions[-1]),
        )
        conn.execute(
            "INSERT INTO context_items(session_id, position, summary_id) VALUES (?, ?, ?)",
            (session_id, positions[0], summary_id),
        )
        conn.execute("INSERT INTO embed_queue(kind, item_id) VALUES ('summary', ?)", (summary_id,))
    return Summary(summary_id, *values)  # as written: immutable, not read back


def _span(
    conn: apsw.Connection, sources: Iterable[tuple[str, int]]
) -> tuple[int, int, float, float, int]:
    """first_seq, last_seq, start_at, end_at, message_count over the sources.

    Two aggregate queries (messages, child summaries), not one per source:
    a leaf summary folds dozens of messages, and compaction runs on the
    host's turn.
    """
    messages: list[int] = []
    children: list[int] = []
    for kind, ident in sources:
        (messages if kind == "message" else children).append(int(ident))
    first, last, start, end, count = 1 << 62, -1, float("inf"), float("-inf"), 0
    parts = (
        (
            messages,
            "SELECT min(seq), max(seq), min(created_at), max(created_at), count(*) "
            "FROM messages WHERE id IN (SELECT value FROM json_each(?))",
        ),
        (
            children,
            "SELECT min(first_seq), max(last_seq), min(start_at), max(end_at), "
            "total(message_count) FROM summaries WHERE id IN (SELECT value FROM json_each(?))",
        ),
    )
    for ids, sql in parts:
        if not ids:
            continue
        row = fetch_one(conn, sql, (json.dumps(ids),))
        assert row is not None and row[0] is not None, "foreign keys: the sources exist"
        first, last = min(first, int(row[0])), max(last, int(row[1]))
        start, end = min(start, float(row[2])), max(end, float(row[3]))
        count += int(row[4])
    return first, last, start, end, count


def _prefixed(alias: str, columns: str) -> str:
    return ", ".join(f"{alias}.{c.strip()}" for c in columns.split(","))


def session_compaction(store: LcmStore, session_id: str) -> dict[str, int]:
    """How far one session is compacted: its summaries, their deepest level, and its live
    context (raw messages and summaries in it). Primary-key and index ranges only."""
    summaries, depth = fetch_one(
        store.conn,
        "SELECT count(*), coalesce(max(depth), 0) FROM summaries WHERE session_id = ?",
        (session_id,),
    ) or (0, 0)
    raw, folded = fetch_one(
        store.conn,
        "SELECT count(message_id), count(summary_id) FROM context_items WHERE session_id = ?",
        (session_id,),
    ) or (0, 0)
    return {
        "summaries": int(summaries),
        "max_summary_depth": int(depth),
        "context_messages": int(raw),
        "context_summaries": int(folded),
    }


def latest_summary_level(store: LcmStore) -> int | None:
    """The escalation level of the newest summary (None: no summary yet)."""
    level = fetch_value(store.conn, "SELECT level FROM summaries ORDER BY id DESC LIMIT 1")
    return None if level is None else int(level)
