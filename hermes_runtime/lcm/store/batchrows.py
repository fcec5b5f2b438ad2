"""A batch's rows: where each prepared message goes, and the multi-row INSERTs.

Why a module of its own: these are plain records and one statement builder
the store's write path (``LcmStore._apply``, ``_insert_messages``) works
with; they hold no connection and no lock.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import apsw

from hermes_runtime.lcm.records import HostState

INSERT_MESSAGES = (
    "INSERT INTO messages(id, session_id, seq, role, content, content_json, tool_calls, "
    "tool_call_id, name, extra, output_id, token_count, created_at) VALUES "
)
INSERT_CONTEXT_ITEMS = "INSERT INTO context_items(session_id, position, message_id) VALUES "
# Rows a multi-row INSERT carries at most (a power of two, see ``insert_rows``): bounds
# the bound variables (13 a row) and the distinct statements compiled and cached.
ROWS_PER_STATEMENT = 256

UNKNOWN: Any = object()  # a session's newest message, not looked up yet


@dataclass(slots=True)
class Placed:
    """A prepared row given its place: session, seq, context position, write time."""

    session_id: str
    seq: int
    pos: int
    row: dict[str, Any]
    stamp: float


@dataclass
class Cursor:
    """One session inside a batch: its next seq and position, newest message, host state."""

    seq: int
    pos: int
    last: Any = UNKNOWN  # (role, content, created_at) | None | UNKNOWN
    asked: tuple[str | None, float] | None = None  # the newest user message (with ``last``)
    host_state: HostState | None = None


def insert_rows(conn: apsw.Connection, insert: str, rows: Sequence[tuple[Any, ...]]) -> None:
    """``insert`` (``INSERT INTO t(columns) VALUES ``) of ``rows``, a statement a chunk.

    Chunks of a power of two rows (the largest that fits, at most
    ``ROWS_PER_STATEMENT``): a table's inserts then have nine texts at most, and they
    stay compiled in the connection's statement cache (``common.sqlite``). A chunk the
    size of each batch would make a new text for nearly every batch, compiled again at
    every flush.
    """
    if not rows:
        return
    values = "(" + ", ".join("?" * len(rows[0])) + ")"
    start = 0
    while start < len(rows):
        size = min(ROWS_PER_STATEMENT, 1 << ((len(rows) - start).bit_length() - 1))
        chunk = rows[start : start + size]
        conn.execute(insert + ", ".join([values] * size), [v for r in chunk for v in r])
        start += size
