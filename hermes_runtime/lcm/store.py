"""The LCM database: immutable messages, summaries, their edges, live context.

Concurrency model: one apsw connection per thread (WAL lets readers run
beside the writer), one in-process write lock, and ``BEGIN IMMEDIATE`` for
every write so writers from other processes queue on the busy timeout
instead of failing with "database is locked".
Every write is O(1) in the size of the history: counters live on the
session row, nothing scans the message table on ingest.
"""

from __future__ import annotations

import contextlib
import json
import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import apsw

from hermes_runtime.common.errors import RuntimeFailure
from hermes_runtime.common.sqlite import connect, enable_wal
from hermes_runtime.lcm import fulltext
from hermes_runtime.lcm import outputs as out
from hermes_runtime.lcm.checkpoints import Checkpointer
from hermes_runtime.lcm.records import (
    KNOWN_KEYS,
    ContextItem,
    OutputRecord,
    StoredMessage,
    Summary,
    message_text,
    message_tokens,
)
from hermes_runtime.lcm.replay import is_repeated_turn
from hermes_runtime.lcm.schema import (
    check_lcm_database,
    fetch_all,
    fetch_one,
    fetch_value,
    migrate,
    write_transaction,
)
from hermes_runtime.lcm.writebehind import HostState, Job, WriteBehind

logger = logging.getLogger(__name__)

MESSAGE_COLUMNS = (
    "id, session_id, seq, role, content, content_json, tool_calls, tool_call_id, name, extra, "
    "output_id, token_count, created_at"
)
SUMMARY_COLUMNS = (
    "id, session_id, depth, content, token_count, source_tokens, level, first_seq, last_seq, "
    "start_at, end_at, message_count, created_at"
)
DEFAULT_EXTERNALIZE_CHARS = 16_000
DEFAULT_BUSY_TIMEOUT_MS = 30_000
ENCODED_STATES = 64  # sessions whose last committed host state is remembered as a dict


INSERT_MESSAGES = (
    "INSERT INTO messages(id, session_id, seq, role, content, content_json, tool_calls, "
    "tool_call_id, name, extra, output_id, token_count, created_at) VALUES "
)
INSERT_CONTEXT_ITEMS = "INSERT INTO context_items(session_id, position, message_id) VALUES "
# Rows a multi-row INSERT carries at most: bounds the distinct statements SQLite
# compiles and apsw caches (one per row count), and the bound variables (13 a row).
ROWS_PER_STATEMENT = 256

_UNKNOWN: Any = object()  # a session's newest message, not looked up yet


@dataclass(slots=True)
class _Placed:
    """A prepared row given its place: session, seq, context position, write time."""

    session_id: str
    seq: int
    pos: int
    row: dict[str, Any]
    stamp: float


@dataclass
class _Cursor:
    """One session inside a batch: its next seq and position, newest message, host state."""

    seq: int
    pos: int
    last: Any = _UNKNOWN  # (role, content, created_at) | None | _UNKNOWN
    host_state: HostState | None = None


@dataclass(frozen=True)
class NewSummary:
    """A summary about to replace a run of context items."""

    depth: int
    content: str
    token_count: int
    source_tokens: int
    level: int
    sources: list[tuple[str, int]]  # ("message" | "summary", id), in order


class LcmStore:
    """Thread-safe access to one LCM database and its outputs directory."""

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
        thread of their own (``checkpoints.py``). ``commit_interval`` > 0
        (seconds) lets ``ingest_many(defer=True)`` queue its rows for a
        writer thread that commits them in batches (``writebehind.py``); every
        other write and every read through ``conn`` commits the queue first.

        Read-only opens refuse a missing file and any file without the LCM
        schema; read-write opens create the schema only in a new (empty) file
        and only with ``create``, and check a file before anything changes it
        (its journal mode included), so a foreign database stays as it was.
        """
        self.db_path = Path(db_path)
        self.outputs_dir = Path(outputs_dir) if outputs_dir else self.db_path.parent / "outputs"
        self.externalize_chars = externalize_chars
        self.readonly = readonly
        self._local = threading.local()
        self._write_lock = threading.RLock()
        self._checkpointer: Checkpointer | None = None
        self._behind: WriteBehind | None = None
        # The full-text index's writer (``fulltext.py``); read-only opens only read it.
        self.fulltext: fulltext.FullTextIndex | None = None
        self.fulltext_path = fulltext.index_path(self.db_path)
        # The dict each session's committed host state was encoded from, with its text.
        self._encoded: OrderedDict[str, tuple[dict[str, Any], str]] = OrderedDict()
        # Called after each commit with each job written (the engine's metrics, its worker).
        self.on_stored: Callable[[Job], None] | None = None
        if readonly or not create:
            self._require_file()
        if readonly:
            self._open_readonly()
        else:
            self._open_for_writing(create)
            self._open_fulltext()
        if background_checkpoints and not readonly:
            self._checkpointer = Checkpointer(self._connection, self.close)
            self._checkpointer.install(self._connection())
        if commit_interval > 0 and not readonly:
            self._behind = WriteBehind(
                self._commit_jobs, self._write_lock, commit_interval, on_exit=self.close
            )

    def _open_fulltext(self) -> None:
        """Open (create) the full-text index and bring it up to lcm.db.

        After an upgrade from a release that kept the postings inside lcm.db,
        or a restore, this first pass indexes everything: logged, as it may
        take a while on a large database (about 20 s a million messages).
        """
        try:
            index = fulltext.FullTextIndex(self.db_path, DEFAULT_BUSY_TIMEOUT_MS)
        except BaseException:
            self.close()
            raise
        started = time.monotonic()
        try:
            done = index.catch_up()
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

    def _require_file(self) -> None:
        if not self.db_path.is_file():
            raise RuntimeFailure(f"LCM database {self.db_path}: no such file")

    def _open_readonly(self) -> None:
        try:
            check_lcm_database(self.conn, self.db_path, allow_empty=False)
        except BaseException:
            self.close()
            raise

    def _open_for_writing(self, create: bool) -> None:
        self.db_path.parent.mkdir(parents=True, exist_ok=True)
        try:
            conn = connect(
                self.db_path, busy_timeout_ms=DEFAULT_BUSY_TIMEOUT_MS, wal=False, uri=True
            )
        except apsw.Error as exc:
            raise RuntimeFailure(f"LCM database {self.db_path}: {exc}") from exc
        try:
            check_lcm_database(conn, self.db_path, allow_empty=create)
            _set_wal(conn)
            with self._write_lock:
                migrate(conn)
        except apsw.Error as exc:
            conn.close()
            raise RuntimeFailure(f"LCM database {self.db_path}: {exc}") from exc
        except BaseException:
            conn.close()
            raise
        self._adopt(conn)

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
        return self._connection()

    def _connection(self) -> apsw.Connection:
        """This thread's connection (apsw connections are not shared across threads here)."""
        conn = getattr(self._local, "conn", None)
        if conn is None:
            try:
                conn = connect(
                    self.db_path,
                    readonly=self.readonly,
                    busy_timeout_ms=DEFAULT_BUSY_TIMEOUT_MS,
                    wal=False,
                    uri=True,
                )
            except apsw.Error as exc:
                raise RuntimeFailure(f"LCM database {self.db_path}: {exc}") from exc
            if not self.readonly:
                _set_wal(conn)
            self._adopt(conn)
        return conn

    def _adopt(self, conn: apsw.Connection) -> None:
        conn.create_scalar_function("regexp", _regexp, 2, deterministic=True)  # type: ignore[arg-type]
        if self._checkpointer is not None and not self.readonly:
            self._checkpointer.install(conn)
        self._local.conn = conn
        self._local.fulltext_attached = False

    def searchable(self) -> apsw.Connection:
        """This thread's connection (``conn``) with the full-text index attached and current.

        A writable store indexes what it committed before it searches, so a
        tool finds the turn just stored; a read-only one reads the index as
        its writer left it (``fulltext.py``).
        """
        conn = self.conn
        self.index_now()
        if not self._local.fulltext_attached:
            if not fulltext.attach_readonly(conn, self.fulltext_path):
                raise RuntimeFailure(
                    f"LCM full-text index {self.fulltext_path}: no such file; a writable "
                    f"open of {self.db_path} builds it (the gateway's engine, or "
                    "`hermes-runtime lcm doctor --rebuild-fts`)"
                )
            self._local.fulltext_attached = True
        return conn

    def index_now(self) -> None:
        """Index every committed row now (a writable store; read-only ones cannot)."""
        index = self.fulltext
        if index is not None:
            index.catch_up()

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
        with self._write_lock:
            self.flush()
            conn = self._connection()
            self._local.writing = getattr(self._local, "writing", 0) + 1
            try:
                with write_transaction(conn):
                    yield conn
            finally:
                self._local.writing -= 1
            self._indexed_after_commit()

    def flush(self) -> None:
        """Commit every queued write now, on this thread; raise an error a batch met.

        Inside a write transaction of this thread it does nothing: the
        transaction began after a flush, and nesting one is impossible.
        """
        behind, local = self._behind, self._local
        busy = getattr(local, "writing", 0) or getattr(local, "no_flush", False)
        if behind is not None and not busy:
            behind.flush()

    def skip_flush_on_this_thread(self) -> None:
        """This thread's reads and writes never commit the queue (nor raise its errors).

        For a background thread that works on committed rows only (the
        embedding worker): the queued turns are nothing to it, and an error of
        a failed batch belongs to the hook and the readers that need the turns.
        """
        self._local.no_flush = True

    def stop_group_commit(self) -> None:
        """Commit what is queued and end the writer thread; later writes are synchronous."""
        behind, self._behind = self._behind, None
        if behind is not None:
            behind.stop()

    @property
    def group_commit(self) -> WriteBehind | None:
        return self._behind

    @contextlib.contextmanager
    def busy_timeout(self, milliseconds: int) -> Iterator[None]:
        """Bound how long this thread waits on another process's write lock.

        Background work that must not stall its caller (the per-turn sync
        runs on Hermes' reply path) gives up with ``apsw.BusyError`` after
        ``milliseconds`` instead of the default 30 s; the next sync catches up.
        """
        conn = self._connection()
        conn.set_busy_timeout(milliseconds)
        try:
            yield
        finally:
            conn.set_busy_timeout(DEFAULT_BUSY_TIMEOUT_MS)

    def start_fulltext_thread(self) -> None:
        """Index on a thread of its own from now on (a long-lived engine's store)."""
        if self.fulltext is not None:
            self.fulltext.start()

    def stop_fulltext(self) -> None:
        """Stop the indexer thread, index what is left, close the index's connection."""
        index, self.fulltext = self.fulltext, None
        if index is not None:
            index.close()

    def stop_checkpoints(self) -> None:
        """Stop the checkpoint thread (its last checkpoint finishes first)."""
        if self._checkpointer is not None:
            self._checkpointer.stop()

    def close(self) -> None:
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            conn.close()
            self._local.conn = None

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

    def session_ids(self) -> list[str]:
        return [r[0] for r in self.conn.execute("SELECT id FROM sessions ORDER BY created_at")]

    def has_session(self, session_id: str) -> bool:
        row = fetch_one(self.conn, "SELECT 1 FROM sessions WHERE id = ?", (session_id,))
        return row is not None

    def bind_host_session(self, host_session_id: str, lcm_session_id: str) -> None:
        """Persist that the host's session id continues ``lcm_session_id``.

        Creates no session: an LCM session exists once a message is stored in
        it. (Hermes builds an agent, and binds a fresh id, for every API
        request and every background review fork; creating a session there
        left most sessions empty.) A host id that is its own LCM session is
        the default and needs no row.
        """
        _validate_session_id(host_session_id)
        _validate_session_id(lcm_session_id)
        if host_session_id == lcm_session_id:
            if self.host_session(host_session_id) is not None:
                with self.writing() as conn:
                    conn.execute(
                        "DELETE FROM host_sessions WHERE host_session_id = ?", (host_session_id,)
                    )
            return
        with self.writing() as conn:
            conn.execute(
                "INSERT INTO host_sessions(host_session_id, lcm_session_id, bound_at) "
                "VALUES (?, ?, ?) ON CONFLICT(host_session_id) DO UPDATE SET "
                "lcm_session_id = excluded.lcm_session_id, bound_at = excluded.bound_at "
                "WHERE lcm_session_id <> excluded.lcm_session_id",
                (host_session_id, lcm_session_id, time.time()),
            )

    def host_session(self, host_session_id: str) -> str | None:
        """The LCM session bound to a host session id, or None."""
        value = fetch_value(  # bindings are never queued: no flush
            self._connection(),
            "SELECT lcm_session_id FROM host_sessions WHERE host_session_id = ?",
            (host_session_id,),
        )
        return str(value) if value is not None else None

    def host_state(self, session_id: str) -> dict[str, Any]:
        text = self.host_state_text(session_id)
        return json.loads(text) if text else {}

    def host_state_text(self, session_id: str) -> str | None:
        """The host state as stored, or as a queued write will store it (JSON text), or None."""
        state = self.host_state_raw(session_id)
        return state if state is None or isinstance(state, str) else json.dumps(state)

    def _encode_state(self, session_id: str, state: HostState | None) -> str | None:
        """The JSON text to store; a dict's is remembered (``host_state_raw``).

        Remembered before the commit: a text that never commits is never read back.
        """
        if not isinstance(state, dict):
            self._encoded.pop(session_id, None)
            return state
        text = json.dumps(state)
        self._encoded[session_id] = (state, text)
        self._encoded.move_to_end(session_id)
        while len(self._encoded) > ENCODED_STATES:
            self._encoded.popitem(last=False)
        return text

    def host_state_raw(self, session_id: str) -> HostState | None:
        """``host_state_text``, or the very dict a queued write will store (not encoded).

        Never waits for the queue: the turn hook reads it before queuing the next turn.
        This thread's next ``ingest_many`` is refused if a batch fails in between
        (``writebehind.StalePlan``): it is planned on what this returns.
        """
        behind = self._behind
        if behind is not None:
            pending, self._local.planned = behind.pending_state(session_id)
            if pending is not None:
                return pending
        value = fetch_value(
            self._connection(), "SELECT host_state FROM sessions WHERE id = ?", (session_id,)
        )
        if value is None:
            return None
        encoded = self._encoded.get(session_id)
        if encoded is not None and encoded[1] == value:
            return encoded[0]  # the dict it was encoded from: no parse
        return str(value)

    def set_host_state(self, session_id: str, state: dict[str, Any]) -> None:
        """Save what the host holds; a session with no stored message has nothing to save."""
        self.ingest_many(session_id, [], host_state=state)

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
        is not stored again (``replay.is_repeated_turn``); deciding inside the
        transaction means two writers can never both store it. Without
        messages only the host state of an existing session is saved.

        ``defer`` (with group commit on, see ``__init__``): queue the rows and
        return [] at once; the writer thread stores them in its next batch.
        Otherwise the queue is committed first, then this write: a batch of one.
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
        planned, self._local.planned = getattr(self._local, "planned", None), None
        if not job.rows and host_state is None:
            return []
        behind = self._behind
        if defer and behind is not None:
            behind.submit(job, planned)
            return []
        with self._write_lock:  # flushes first: the queued writes come before this one
            self.flush()
            if behind is not None:
                behind.check_plan(planned)
            self._commit_jobs([job])
        return job.stored

    def _commit_jobs(self, jobs: list[Job]) -> None:
        """Write jobs in one transaction (caller holds the write lock), then report each."""
        conn = self._connection()
        self._local.writing = getattr(self._local, "writing", 0) + 1
        try:
            with write_transaction(conn):
                self._apply(jobs)
        finally:
            self._local.writing -= 1
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
                        (self._encode_state(session_id, job.host_state), session_id),
                    )
                else:
                    cursor.host_state = job.host_state
                continue
            if cursor is None:
                cursor = cursors[session_id] = _Cursor(*self._ensure_session(session_id))
            if window > 0 and cursor.last is _UNKNOWN:
                cursor.last = self._newest_message(session_id)
            seq, pos, last = cursor.seq, cursor.pos, cursor.last
            for row in job.rows:
                if is_repeated_turn(last, row["role"], row["content"], stamp, window):
                    continue
                placed.append((job, _Placed(session_id, seq, pos, row, stamp)))
                last = (row["role"], row["content"], stamp)
                seq, pos = seq + 1, pos + 1
            cursor.seq, cursor.pos, cursor.last = seq, pos, last
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
                        self._encode_state(session_id, cursor.host_state),
                        session_id,
                    ),
                )

    def _newest_message(self, session_id: str) -> tuple[str, str | None, float] | None:
        """(role, content, created_at) of the session's last stored message (the seq index)."""
        row = fetch_one(
            self.conn,
            "SELECT role, content, created_at FROM messages WHERE session_id = ? "
            "ORDER BY seq DESC LIMIT 1",
            (session_id,),
        )
        return (str(row[0]), row[1], float(row[2])) if row else None

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
            sha, rel = out.write_output(self.outputs_dir, data)
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
        """Insert placed rows with a statement a table, not a statement a row.

        While the FTS5 postings were written in these transactions (schema
        1-3), each statement also flushed them: 52 us a message against 31 us
        for one multi-row ``INSERT`` in 57-message transactions
        (``bench/lcm_fts_statements.py``); without them (``fulltext.py``) a
        batch still costs a few statements, not three a message. Ids are
        given, not taken: under the write lock the next ones are
        ``max(id) + 1`` on, as SQLite would choose them.
        """
        if not placed:
            return []
        conn = self._connection()
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

    # -- reads -------------------------------------------------------------

    def message(self, message_id: int) -> StoredMessage | None:
        row = fetch_one(
            self.conn, f"SELECT {MESSAGE_COLUMNS} FROM messages WHERE id = ?", (message_id,)
        )
        return StoredMessage(*row) if row else None

    def summary(self, summary_id: int) -> Summary | None:
        row = fetch_one(  # summaries are never queued: no flush (the turn hook reads them)
            self._connection(),
            f"SELECT {SUMMARY_COLUMNS} FROM summaries WHERE id = ?",
            (summary_id,),
        )
        return Summary(*row) if row else None

    def summary_sessions(self, summary_ids: Sequence[int]) -> dict[int, str]:
        """The session of each of these summaries that exists (one query, no content read)."""
        rows = fetch_all(  # summaries are never queued: no flush
            self._connection(),
            "SELECT id, session_id FROM summaries WHERE id IN (SELECT value FROM json_each(?))",
            (json.dumps([int(i) for i in summary_ids]),),
        )
        return {int(r[0]): str(r[1]) for r in rows}

    def output(self, output_id: str) -> OutputRecord | None:
        row = fetch_one(
            self.conn,
            "SELECT id, sha256, size, encoding, relpath, created_at FROM outputs WHERE id = ?",
            (output_id,),
        )
        return OutputRecord(*row) if row else None

    def output_bytes(self, record: OutputRecord) -> bytes:
        path = self.outputs_dir / record.relpath
        try:
            return path.read_bytes()
        except OSError as exc:
            raise RuntimeFailure(f"LCM output {record.id}: cannot read {path}: {exc}") from exc

    def full_message(self, message: StoredMessage) -> dict[str, Any]:
        """The message exactly as ingested, an externalized content read back from disk."""
        if message.output_id is None:
            return message.to_openai()
        record = self.output(message.output_id)
        if record is None:
            raise RuntimeFailure(f"LCM message {message.ref}: output {message.output_id} missing")
        return message.to_openai(out.decode_content(self.output_bytes(record), record.encoding))

    def summary_sources(
        self, summary_id: int, offset: int = 0, limit: int = 1000
    ) -> list[StoredMessage | Summary]:
        rows = fetch_all(
            self.conn,
            "SELECT message_id, child_id FROM summary_sources WHERE summary_id = ? "
            "ORDER BY ord LIMIT ? OFFSET ?",
            (summary_id, limit, offset),
        )
        result: list[StoredMessage | Summary] = []
        for message_id, child_id in rows:
            item = (
                self.message(int(message_id))
                if message_id is not None
                else self.summary(int(child_id))
            )
            assert item is not None, "foreign keys guarantee the source exists"
            result.append(item)
        return result

    def summary_source_count(self, summary_id: int) -> int:
        return int(
            fetch_value(
                self.conn,
                "SELECT count(*) FROM summary_sources WHERE summary_id = ?",
                (summary_id,),
            )
        )

    def context_items(self, session_id: str) -> list[ContextItem]:
        """The live context in order; joins keep it one query (no N+1)."""
        cursor = self.conn.execute(
            f"SELECT c.position, {_prefixed('m', MESSAGE_COLUMNS)}, "
            f"{_prefixed('s', SUMMARY_COLUMNS)} FROM context_items c "
            "LEFT JOIN messages m ON m.id = c.message_id "
            "LEFT JOIN summaries s ON s.id = c.summary_id "
            "WHERE c.session_id = ? ORDER BY c.position",
            (session_id,),
        )
        width_m = len(MESSAGE_COLUMNS.split(","))
        items = []
        for row in cursor:
            m_row, s_row = row[1 : 1 + width_m], row[1 + width_m :]
            items.append(
                ContextItem(
                    position=int(row[0]),
                    message=StoredMessage(*m_row) if m_row[0] is not None else None,
                    summary=Summary(*s_row) if s_row[0] is not None else None,
                )
            )
        return items

    # -- compaction writes -------------------------------------------------

    def replace_run(
        self, session_id: str, positions: Sequence[int], new: NewSummary
    ) -> Summary | None:
        """Swap a run of context items for one summary, atomically.

        Returns None (and changes nothing) when the run is no longer in the
        context, e.g. another thread compacted the same span meanwhile.
        """
        if not positions:
            return None
        with self.writing():
            present = fetch_value(
                self.conn,
                "SELECT count(*) FROM context_items WHERE session_id = ? AND position "
                "BETWEEN ? AND ?",
                (session_id, positions[0], positions[-1]),
            )
            if present != len(positions):
                return None
            span = self._span(new.sources)
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
            self.conn.execute(
                "INSERT INTO summaries(session_id, depth, content, token_count, source_tokens, "
                "level, first_seq, last_seq, start_at, end_at, message_count, created_at) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                values,
            )
            summary_id = self.conn.last_insert_rowid()
            self.conn.executemany(
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
            self.conn.execute(
                "DELETE FROM context_items WHERE session_id = ? AND position BETWEEN ? AND ?",
                (session_id, positions[0], positions[-1]),
            )
            self.conn.execute(
                "INSERT INTO context_items(session_id, position, summary_id) VALUES (?, ?, ?)",
                (session_id, positions[0], summary_id),
            )
            self.conn.execute(
                "INSERT INTO embed_queue(kind, item_id) VALUES ('summary', ?)", (summary_id,)
            )
        return Summary(summary_id, *values)  # as written: immutable, not read back

    def _span(self, sources: Iterable[tuple[str, int]]) -> tuple[int, int, float, float, int]:
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
            row = fetch_one(self.conn, sql, (json.dumps(ids),))
            assert row is not None and row[0] is not None, "foreign keys: the sources exist"
            first, last = min(first, int(row[0])), max(last, int(row[1]))
            start, end = min(start, float(row[2])), max(end, float(row[3]))
            count += int(row[4])
        return first, last, start, end, count

    # -- counts ------------------------------------------------------------

    def counts(self) -> dict[str, int]:
        queries = {
            "sessions": "SELECT count(*) FROM sessions",
            "messages": "SELECT max(id) FROM messages",
            "summaries": "SELECT count(*) FROM summaries",
            "outputs": "SELECT count(*) FROM outputs",
            "embeddings": "SELECT count(*) FROM embeddings",
            "embed_queue": "SELECT count(*) FROM embed_queue",
        }
        return {name: int(fetch_value(self.conn, sql) or 0) for name, sql in queries.items()}


def _set_wal(conn: apsw.Connection) -> None:
    """WAL (readers beside the writer) and NORMAL sync; only ever on an LCM database."""
    enable_wal(conn, DEFAULT_BUSY_TIMEOUT_MS / 1000)


def _prefixed(alias: str, columns: str) -> str:
    return ", ".join(f"{alias}.{c.strip()}" for c in columns.split(","))


def _regexp(pattern: str, value: str | None) -> bool:
    import re

    return value is not None and re.search(pattern, value) is not None


def _validate_session_id(session_id: str) -> None:
    if not isinstance(session_id, str) or not session_id or len(session_id) > 256:
        raise RuntimeFailure(f"LCM session id must be 1-256 characters, got {session_id!r}")


def _insert_rows(conn: apsw.Connection, insert: str, rows: Sequence[tuple[Any, ...]]) -> None:
    """``insert`` (``INSERT INTO t(columns) VALUES ``) of ``rows``, a statement a chunk."""
    for start in range(0, len(rows), ROWS_PER_STATEMENT):
        chunk = rows[start : start + ROWS_PER_STATEMENT]
        row = "(" + ", ".join("?" * len(chunk[0])) + ")"
        conn.execute(insert + ", ".join([row] * len(chunk)), [v for r in chunk for v in r])
