"""The LCM database's write path: immutable messages in, one transaction a batch.

Concurrency model: one apsw connection per thread (WAL lets readers run
beside the writer), one in-process write lock, and ``BEGIN IMMEDIATE`` for
every write so writers from other processes queue on the busy timeout
instead of failing with "database is locked"; ``connections.py`` owns the
connections and the lock. Every write is O(1) in the size of the history:
counters live on the session row, nothing scans the message table on ingest.
Reads own their SQL elsewhere (``messagereads``, ``dag``: summaries and the
live context, ``sessions``); ``LcmStore`` keeps the writes, their queue, and
the threads a long-lived writer starts (``start_background``), none in its
constructor.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import apsw

from hermes_runtime.common.errors import RuntimeFailure
from hermes_runtime.lcm.records import (
    KNOWN_KEYS,
    HostState,
    Job,
    StoredMessage,
    message_text,
    message_tokens,
)
from hermes_runtime.lcm.records import validate_session_id as _validate_session_id
from hermes_runtime.lcm.store import fulltext
from hermes_runtime.lcm.store import outputs as out
from hermes_runtime.lcm.store.basestore import StoreBase
from hermes_runtime.lcm.store.batchrows import INSERT_CONTEXT_ITEMS, INSERT_MESSAGES
from hermes_runtime.lcm.store.batchrows import UNKNOWN as _UNKNOWN
from hermes_runtime.lcm.store.batchrows import Cursor as _Cursor
from hermes_runtime.lcm.store.batchrows import Placed as _Placed
from hermes_runtime.lcm.store.batchrows import insert_rows as _insert_rows
from hermes_runtime.lcm.store.checkpoints import Checkpointer
from hermes_runtime.lcm.store.connections import DEFAULT_BUSY_TIMEOUT_MS
from hermes_runtime.lcm.store.replay import is_repeated_turn, without_answered_turn
from hermes_runtime.lcm.store.schema import fetch_one, fetch_value, write_transaction
from hermes_runtime.lcm.store.writebehind import STORAGE_ERRORS, WriteBehind, is_storage_error

logger = logging.getLogger(__name__)

DEFAULT_EXTERNALIZE_CHARS = 16_000


class LcmStore(StoreBase):
    """Thread-safe access to one LCM database and its outputs directory.

    This class is the write path; reads, transactions and the threads'
    lifecycle are ``StoreBase``'s (``basestore.py``), which also opens nothing: this
    constructor opens the connections, the full-text index and the queue.
    """

    def __init__(
        self,
        db_path: Path | str,
        outputs_dir: Path | str | None = None,
        externalize_chars: int = DEFAULT_EXTERNALIZE_CHARS,
        readonly: bool = False,
        create: bool = True,
        background_checkpoints: bool = False,
        commit_interval: float = 0.0,
    ) -> None:
        """Open (``readonly``: only open) an LCM database; never touch any other database.

        ``background_checkpoints`` (long-lived writers: the gateway's engine)
        moves WAL checkpoints from the commit that crosses the threshold to a
        thread of their own (``checkpoints.py``), once ``start_background``
        starts it; no thread starts here. ``commit_interval`` > 0
        (seconds) lets ``ingest_many(defer=True)`` queue its rows for a
        writer thread that commits them in batches (``writebehind.py``); every
        other write and every read through ``conn`` commits the queue first.

        Read-only opens refuse a missing file and any file without the LCM
        schema; read-write opens create the schema only in a new (empty) file
        and only with ``create``, and check a file before anything changes it
        (its journal mode included), so a foreign database stays as it was.
        """
        super().__init__(db_path, readonly)
        self.outputs_dir = Path(outputs_dir) if outputs_dir else self.db_path.parent / "outputs"
        self.externalize_chars = externalize_chars
        # Called after each commit with each job written (the engine's metrics, its worker).
        self.on_stored: Callable[[Job], None] | None = None
        if readonly or not create:
            self.db.require_file()
        if readonly:
            self.db.open_readonly()
        else:
            self.db.open_for_writing(create)
            self._open_fulltext()
        if background_checkpoints and not readonly:
            self._checkpointer = Checkpointer(self.db.connection, self.db.close)
            self._checkpointer.install(self.db.connection())
        if commit_interval > 0 and not readonly:
            self._behind = WriteBehind(
                self._commit_jobs, self.db.write_lock, commit_interval, on_exit=self.db.close
            )
        self.db.checkpointer = self._checkpointer  # hands off the checkpoints of every thread

    def _open_fulltext(self) -> None:
        """Open (create) the full-text index and bring it up to lcm.db.

        After an upgrade from a release that kept the postings inside lcm.db,
        or a restore, this first pass indexes everything: logged, as it takes
        a while on a large database.
        """
        try:
            index = fulltext.FullTextIndex(self.db_path, DEFAULT_BUSY_TIMEOUT_MS)
        except BaseException:
            self.close()
            raise
        started = time.monotonic()
        try:
            done = index.catch_up()
        except STORAGE_ERRORS as exc:  # derived data: the next pass indexes those rows
            logger.warning("LCM: full-text index %s: catch-up failed: %s", self.fulltext_path, exc)
            done = fulltext.CatchUp()
        except BaseException:
            index.close(catch_up=False)
            self.close()
            raise
        self.fulltext = index
        rows = sum(done.indexed.values())
        if rows >= 10_000 or done.restarted:
            logger.info(
                "LCM: full-text index %s: indexed %d rows in %.1f s%s",
                self.fulltext_path,
                rows,
                time.monotonic() - started,
                f" (started again: {', '.join(done.restarted)})" if done.restarted else "",
            )

    # -- ingest ------------------------------------------------------------

    def ingest(
        self, session_id: str, message: dict[str, Any], created_at: float | None = None
    ) -> StoredMessage:
        """Store one message in its own transaction and append it to the live context."""
        return self.ingest_many(session_id, [message], created_at)[0]

    def ingest_many(
        self,
        session_id: str,
        messages: Sequence[dict[str, Any]],
        created_at: float | None = None,
        host_state: HostState | None = None,
        replay_window: float = 0.0,
        defer: bool = False,
        merged: int = 0,
    ) -> list[StoredMessage]:
        """Store messages in one transaction (batched import); outputs are written first.

        ``host_state`` (JSON text, or a dict to encode) is saved in the same
        transaction, so what the host is known to hold never disagrees with
        what was stored (no re-ingest after a crash between the two). With
        ``replay_window`` > 0, a user
        message repeating the session's newest stored message, a user message
        stored at most that many seconds ago, is the retry of a cut turn and
        is not stored again (``replay.is_repeated_turn``), nor an answered turn
        the host merged ahead of a new one (``replay.answered_head``); deciding
        inside the transaction means two writers can never both store it. Without
        messages only the host state of an existing session is saved.

        ``defer`` (with group commit on, see ``__init__``): queue the rows and
        return [] at once; the writer thread stores them in its next batch.
        Otherwise the queue is committed first, then this write: a batch of one.
        A deferred write that fails for want of storage is held in memory and
        written once the volume takes it (``writebehind.py``).
        """
        _validate_session_id(session_id)
        job = Job(
            session_id,
            [self._prepare(m) for m in messages],
            created_at if created_at is not None else time.time(),
            host_state,
            replay_window,
            merged,
        )
        planned, self.db.local.planned = getattr(self.db.local, "planned", None), None
        if not job.rows and host_state is None:
            return []
        behind = self._behind
        if defer and behind is not None and (behind.interval > 0 or not behind.settled()):
            behind.submit(job, planned)  # group commit, or behind held turns: in order
            return []
        with self.db.write_lock:  # flushes first: the queued writes come before this one
            try:
                self.flush()
                if behind is not None:
                    behind.check_plan(planned)
                self._commit_jobs([job])
            except Exception as exc:  # the turn hook's: held (writebehind.py)
                if not defer or not is_storage_error(exc):
                    raise
                self._hold(job, exc, planned)
                return []
        return job.stored

    def _hold(self, job: Job, exc: BaseException, planned: int | None) -> None:
        """Hold a write the volume refused (caller holds the write lock; ``writebehind.py``)."""
        if self._behind is None:  # no group commit: a queue only for what is held
            self._behind = WriteBehind(
                self._commit_jobs, self.db.write_lock, 0.0, on_exit=self.db.close
            )
        self._behind.hold(job, exc, planned)

    def _commit_jobs(self, jobs: list[Job]) -> None:
        """Write jobs in one transaction (caller holds the write lock), then report each."""
        conn = self.db.connection()
        self.db.local.writing = getattr(self.db.local, "writing", 0) + 1
        try:
            with write_transaction(conn):
                self._apply(jobs)
        except BaseException:
            for job in jobs:  # rolled back: a held batch is applied again from scratch
                job.stored.clear()
            raise
        finally:
            self.db.local.writing -= 1
        self._indexed_after_commit()
        if self.on_stored is not None:
            for job in jobs:
                try:
                    self.on_stored(job)
                except Exception as exc:  # committed: a report failing is no failed batch
                    logger.warning("LCM: after a commit: %s", exc)

    def _apply(self, jobs: list[Job]) -> None:
        """Jobs' rows, counters and host states, in order, inside the caller's transaction.

        A batch is one transaction, so no reader ever sees a state between two of
        its jobs: each session's counters and newest host state are written once,
        at the end, and a session's counters are read once, at its first job.
        """
        cursors: dict[str, _Cursor] = {}
        placed: list[tuple[Job, _Placed]] = []
        for job in jobs:
            session_id, stamp, window = job.session_id, job.stamp, job.replay_window
            cursor = cursors.get(session_id)
            if not job.rows:  # only what the host holds; a session without messages has none
                if cursor is None:
                    self.conn.execute(
                        "UPDATE sessions SET host_state = ? WHERE id = ?",
                        (self._states.encode(session_id, job.host_state), session_id),
                    )
                else:
                    cursor.host_state = job.host_state
                continue
            if cursor is None:
                cursor = cursors[session_id] = _Cursor(*self._ensure_session(session_id))
            if window > 0 and cursor.last is _UNKNOWN:
                cursor.last, cursor.asked = self._newest_messages(session_id)
            seq, pos, last, asked = cursor.seq, cursor.pos, cursor.last, cursor.asked
            for row in job.rows:
                if is_repeated_turn(last, row["role"], row["content"], stamp, window):
                    continue
                if window > 0 and row["output_id"] is None:  # not ``row`` itself: kept for a retry
                    row = without_answered_turn(row, last, asked, stamp, window)
                placed.append((job, _Placed(session_id, seq, pos, row, stamp)))
                last = (row["role"], row["content"], stamp)
                asked = (row["content"], stamp) if row["role"] == "user" else asked
                seq, pos = seq + 1, pos + 1
            cursor.seq, cursor.pos, cursor.last, cursor.asked = seq, pos, last, asked
            if job.host_state is not None:
                cursor.host_state = job.host_state
        stored = self._insert_messages([message for _, message in placed])
        for (job, _), message in zip(placed, stored, strict=True):
            job.stored.append(message)
        for session_id, cursor in cursors.items():
            if cursor.host_state is None:
                self.conn.execute(
                    "UPDATE sessions SET next_seq = ?, next_pos = ? WHERE id = ?",
                    (cursor.seq, cursor.pos, session_id),
                )
            else:  # one statement: the counters and what the host holds
                self.conn.execute(
                    "UPDATE sessions SET next_seq = ?, next_pos = ?, host_state = ? WHERE id = ?",
                    (
                        cursor.seq,
                        cursor.pos,
                        self._states.encode(session_id, cursor.host_state),
                        session_id,
                    ),
                )

    def _newest_messages(
        self, session_id: str
    ) -> tuple[tuple[str, str | None, float] | None, tuple[str | None, float] | None]:
        """(role, content, created_at) of the session's last stored message, and (content,
        created_at) of its last user message (the seq index; a few rows back at most)."""
        row = fetch_one(
            self.conn,
            "SELECT role, content, created_at FROM messages WHERE session_id = ? "
            "ORDER BY seq DESC LIMIT 1",
            (session_id,),
        )
        if row is None:
            return None, None
        last = (str(row[0]), row[1], float(row[2]))
        if row[0] != "user":
            row = fetch_one(
                self.conn,
                "SELECT role, content, created_at FROM messages WHERE session_id = ? "
                "AND role = 'user' ORDER BY seq DESC LIMIT 1",
                (session_id,),
            )
        return last, ((row[1], float(row[2])) if row else None)

    def _prepare(self, message: dict[str, Any]) -> dict[str, Any]:
        """Split a message into columns; externalize big or base64 content (outside the lock)."""
        if not isinstance(message, dict) or not isinstance(message.get("role"), str):
            raise RuntimeFailure(f"LCM message needs a string 'role': {str(message)[:200]}")
        content = message.get("content")
        row: dict[str, Any] = {
            "role": message["role"],
            "content": content if isinstance(content, str) else None,
            "content_json": None
            if content is None or isinstance(content, str)
            else json.dumps(content, ensure_ascii=False),
            "tool_calls": json.dumps(message["tool_calls"], ensure_ascii=False)
            if message.get("tool_calls") is not None
            else None,
            "tool_call_id": message.get("tool_call_id"),
            "name": message.get("name"),
            "output_id": None,
            "output": None,
            "output_data": None,
        }
        extra = {k: v for k, v in message.items() if k not in KNOWN_KEYS}
        row["extra"] = json.dumps(extra, ensure_ascii=False) if extra else None
        if out.needs_externalizing(content, self.externalize_chars):
            data, encoding = out.encode_content(content)
            sha, rel = out.write_output_later(self.outputs_dir, data)
            output_id = out.output_id_for(sha)
            row["output"] = (output_id, sha, len(data), encoding, rel)
            row["output_data"] = data
            row["output_id"] = output_id
            row["content"] = out.make_stub(output_id, len(data), row["role"], message_text(message))
            row["content_json"] = None
        stub_message = {**message, "content": row["content"] if row["output_id"] else content}
        row["token_count"] = message_tokens(stub_message)
        return row

    def _insert_messages(self, placed: list[_Placed]) -> list[StoredMessage]:
        """Insert placed rows with a few multi-row statements a table, not one a row.

        Chunks of a power of two rows (``batchrows.insert_rows``) leave few
        statement texts to compile, and a batch costs a few statements, not
        three a message. Ids are given, not taken: under the write lock the
        next ones are ``max(id) + 1`` on, as SQLite would choose them.
        """
        if not placed:
            return []
        conn = self.db.connection()
        for message in placed:
            if message.row["output"] is not None:
                self._record_output(conn, message.row, message.stamp)
        first_id = int(fetch_value(conn, "SELECT coalesce(max(id), 0) + 1 FROM messages"))
        columns = [
            (
                first_id + index,
                message.session_id,
                message.seq,
                message.row["role"],
                message.row["content"],
                message.row["content_json"],
                message.row["tool_calls"],
                message.row["tool_call_id"],
                message.row["name"],
                message.row["extra"],
                message.row["output_id"],
                message.row["token_count"],
                message.stamp,
            )
            for index, message in enumerate(placed)
        ]
        places = [
            (values[1], message.pos, values[0])
            for values, message in zip(columns, placed, strict=True)
        ]
        _insert_rows(conn, INSERT_MESSAGES, columns)
        _insert_rows(conn, INSERT_CONTEXT_ITEMS, places)
        conn.execute(
            "INSERT INTO embed_queue(kind, item_id) SELECT 'message', id FROM messages "
            "WHERE id BETWEEN ? AND ?",
            (first_id, first_id + len(columns) - 1),
        )
        return [StoredMessage(*values) for values in columns]

    def _record_output(self, conn: apsw.Connection, row: dict[str, Any], stamp: float) -> None:
        """The row's externalized output: its file (again, if swept) and its ``outputs`` row.

        Inside the write transaction: an orphan sweep (``lcm doctor --fix``)
        deletes only under this lock, so the file we reference exists now and
        stays. It may have been swept since ``_prepare`` found it.
        """
        target = self.outputs_dir / row["output"][4]
        if not target.exists():
            out.write_output(self.outputs_dir, row["output_data"])
        conn.execute(
            "INSERT OR IGNORE INTO outputs(id, sha256, size, encoding, relpath, created_at) "
            "VALUES (?, ?, ?, ?, ?, ?)",
            (*row["output"], stamp),
        )
