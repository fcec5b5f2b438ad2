"""What every user of an LCM store reads and commits through, and its threads' lifecycle.

Why a class of its own: ``LcmStore`` (``lcmstore.py``) is the write path (a
turn's rows, their queue, one transaction a batch). What readers, tools and
the engine need besides (this thread's connection once the queue is
committed, the full-text index attached, a write transaction after the
queued ones, the host state a sync plans on, the background threads started
and stopped) lives here, as the base it builds on. The connections
themselves are ``connections.LcmConnections``'; the SQL of reads lives in
the query modules (``messagereads``, ``dag``, ``sessions``, and
``search.searchreads``).
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Iterator
from pathlib import Path

import apsw

from hermes_runtime.common.errors import RuntimeFailure
from hermes_runtime.lcm.records import HostState
from hermes_runtime.lcm.store import fulltext
from hermes_runtime.lcm.store.checkpoints import Checkpointer
from hermes_runtime.lcm.store.connections import LcmConnections
from hermes_runtime.lcm.store.encodedstates import EncodedStates
from hermes_runtime.lcm.store.schema import fetch_one, fetch_value, write_transaction
from hermes_runtime.lcm.store.writebehind import WriteBehind

logger = logging.getLogger(__name__)

# What ``counts`` reports: table -> its statement ("messages": ids are dense, rows stay).
COUNT_QUERIES = {
    "sessions": "SELECT count(*) FROM sessions",
    "messages": "SELECT max(id) FROM messages",
    "summaries": "SELECT count(*) FROM summaries",
    "outputs": "SELECT count(*) FROM outputs",
    "embeddings": "SELECT count(*) FROM embeddings",
    "embed_queue": "SELECT count(*) FROM embed_queue",
}


class StoreBase:
    """Reads and transactions after the queued turns, and the store's background threads."""

    def __init__(self, db_path: Path | str, readonly: bool) -> None:
        """The store's parts, none opened: its subclass opens the connections it needs."""
        self.db_path = Path(db_path)
        self.readonly = readonly
        # The connection owner (``connections.py``): one connection a thread, the write lock.
        self.db = LcmConnections(self.db_path, readonly)
        # The full-text index's writer (``fulltext.py``); read-only opens only read it.
        self.fulltext: fulltext.FullTextIndex | None = None
        self.fulltext_path = fulltext.index_path(self.db_path)
        self._checkpointer: Checkpointer | None = None
        self._behind: WriteBehind | None = None
        # The dict each session's committed host state was encoded from, with its text.
        self._states = EncodedStates()

    # -- connections -------------------------------------------------------

    @property
    def conn(self) -> apsw.Connection:
        """This thread's connection, once every queued write is committed (``flush``).

        Reads through it see every message a turn hook queued before; writes
        through it come after them.
        """
        behind = self._behind
        if behind is not None and not behind.settled():
            self.flush()
        return self.db.connection()

    def searchable(self) -> apsw.Connection:
        """This thread's connection (``conn``) with the full-text index attached and current.

        A writable store indexes what it committed before it searches, so a
        tool finds the turn just stored; a read-only one reads the index as
        its writer left it (``fulltext.py``).
        """
        conn = self.conn
        if self.fulltext is not None:
            self.fulltext.catch_up()
        if not self.db.local.fulltext_attached:
            if not fulltext.attach_readonly(conn, self.fulltext_path):
                raise RuntimeFailure(
                    f"LCM full-text index {self.fulltext_path}: no such file; a writable "
                    f"open of {self.db_path} builds it (the gateway's engine, or "
                    "`hermes-runtime lcm doctor --rebuild-fts`)"
                )
            self.db.local.fulltext_attached = True
        return conn

    def _indexed_after_commit(self) -> None:
        """Without an indexer thread, a writer indexes its own commits (``fulltext.py``).

        The commit stands whatever happens here: a failed pass is logged, and
        the next one (the next commit, search or open) indexes those rows.
        """
        index = self.fulltext
        if index is None or index.running:
            return
        try:
            index.catch_up()
        except (apsw.Error, RuntimeFailure) as exc:
            logger.warning("LCM: full-text index %s: catch-up failed: %s", self.fulltext_path, exc)

    @contextlib.contextmanager
    def writing(self) -> Iterator[apsw.Connection]:
        """One write transaction after the queued ones: in-process lock, ``BEGIN IMMEDIATE``."""
        with self.db.write_lock:
            self.flush()
            conn = self.db.connection()
            self.db.local.writing = getattr(self.db.local, "writing", 0) + 1
            try:
                with write_transaction(conn):
                    yield conn
            finally:
                self.db.local.writing -= 1
            self._indexed_after_commit()

    def flush(self) -> None:
        """Commit every queued write now, on this thread; raise an error a batch met.

        Inside a write transaction of this thread it does nothing: the
        transaction began after a flush, and nesting one is impossible.
        """
        behind, local = self._behind, self.db.local
        busy = getattr(local, "writing", 0) or getattr(local, "no_flush", False)
        if behind is not None and not busy:
            behind.flush()

    def stop_group_commit(self) -> None:
        """Commit what is queued and end the writer thread; later writes are synchronous."""
        behind, self._behind = self._behind, None
        if behind is not None:
            behind.stop()

    @property
    def group_commit(self) -> WriteBehind | None:
        return self._behind

    def start_background(self) -> None:
        """Start a long-lived writer's threads (the gateway's engine): checkpoints, indexing.

        WAL checkpoints (with ``background_checkpoints``) and full-text
        indexing move off the committing thread from now on. The constructor
        starts no thread, so a CLI command or a test that opens a store for
        one job runs none; the group-commit writer starts with the first
        queued turn (``writebehind.py``).
        """
        if self._checkpointer is not None:
            self._checkpointer.start()
            self._checkpointer.install(self.db.connection())
        if self.fulltext is not None:
            self.fulltext.start()

    def close(self) -> None:
        """Close every connection of the store (``LcmConnections.close``).

        Threads come first: ``LcmEngine.close`` stops group commit, the
        indexer and the checkpoints, then closes the store.
        """
        self.db.close()

    def stop_fulltext(self) -> None:
        """Stop the indexer thread, index what is left, close the index's connection."""
        index, self.fulltext = self.fulltext, None
        if index is not None:
            index.close()

    def stop_checkpoints(self) -> None:
        """Stop the checkpoint thread (its last checkpoint finishes first)."""
        if self._checkpointer is not None:
            self._checkpointer.stop()

    # -- sessions ----------------------------------------------------------

    def _ensure_session(self, session_id: str) -> tuple[int, int]:
        """Counters of a session, created with its first message (never empty)."""
        row = fetch_one(
            self.conn, "SELECT next_seq, next_pos FROM sessions WHERE id = ?", (session_id,)
        )
        if row is None:
            self.conn.execute(
                "INSERT INTO sessions(id, created_at) VALUES (?, ?)", (session_id, time.time())
            )
            return 1, 1
        return int(row[0]), int(row[1])

    def host_state_raw(self, session_id: str) -> HostState | None:
        """``host_state_text``, or the very dict a queued write will store (not encoded).

        Never waits for the queue: the turn hook reads it before queuing the next turn.
        This thread's next ``ingest_many`` is refused if a batch fails in between
        (``writebehind.StalePlan``): it is planned on what this returns.
        """
        behind = self._behind
        if behind is not None:
            pending, self.db.local.planned = behind.pending_state(session_id)
            if pending is not None:
                return pending
        value = fetch_value(
            self.db.connection(), "SELECT host_state FROM sessions WHERE id = ?", (session_id,)
        )
        return None if value is None else self._states.decoded(session_id, str(value))

    def counts(self) -> dict[str, int]:
        """Rows a table (``COUNT_QUERIES``): what ``lcm stats``, the gauges and the CLI report."""
        return {name: int(fetch_value(self.conn, sql) or 0) for name, sql in COUNT_QUERIES.items()}
