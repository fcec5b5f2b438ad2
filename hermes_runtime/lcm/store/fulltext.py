"""lcm.db's full-text index, in a database file of its own, kept up by an indexer.

Why a second file: the FTS5 postings of a message cost more than the rest of storing
it, so written by triggers in lcm.db's own transactions they made up much of a
turn's write, and an indexer writing into lcm.db itself was no better: SQLite has
one writer per file, so it held the lock the next compaction waited for. In
``lcm-fts.db`` (beside ``lcm.db``) the postings are written on the indexer's own
connection, under its own lock, by one ``INSERT ... SELECT`` over every row stored
since the last pass; SQLite runs that statement without Python's GIL, so a gateway's
indexer thread works beside the turn hook, not in turn.

The index is derived: every posting comes from a row of lcm.db (messages and
summaries are never updated or deleted), so it may lag, be deleted, or be
restored from another moment than lcm.db, and ``catch_up`` mends all three.
It indexes the rows past its watermark; when the row at its watermark is not
the one it indexed (lcm.db restored from an earlier snapshot, or another
database altogether) it drops the postings and indexes from the first row.

Readers attach the index read-only (``ATTACHED_AS``), so a store's
``BEGIN IMMEDIATE`` never takes the index's write lock. A writable store
catches up before it searches, so the agent's tools find what was just
stored; a read-only one (the CLI beside a running gateway) sees the index as
of the indexer's last pass, at most ``INDEX_INTERVAL_SECONDS`` behind.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field
from pathlib import Path

import apsw

from hermes_runtime.common.backoff import Backoff
from hermes_runtime.common.errors import RuntimeFailure
from hermes_runtime.common.sqlite import connect
from hermes_runtime.lcm.store.schema import fetch_all

logger = logging.getLogger(__name__)

# The schema name the index is attached under on every connection of an LcmStore.
ATTACHED_AS = "fts"
TOKENIZE = "porter unicode61 remove_diacritics 2"
# How often a long-lived engine's indexer thread looks for new rows: what a read-only
# reader beside it may miss of the newest turns. An idle pass is one read.
INDEX_INTERVAL_SECONDS = 0.05
FAILED_PASS_WAIT_SECONDS = 30.0  # the longest wait after passes that failed in a row


@dataclass(frozen=True)
class Source:
    """One FTS5 table of the index and the lcm.db table its text comes from."""

    table: str
    base: str
    text: str  # SQL expression of the indexed text, over the base table's columns


SOURCES = (
    Source("messages_fts", "messages", "coalesce(content, content_json, '')"),
    Source("summaries_fts", "summaries", "content"),
)

SCHEMA = "".join(
    f"CREATE VIRTUAL TABLE IF NOT EXISTS {s.table} USING fts5("
    f"content, content='', contentless_delete=1, tokenize='{TOKENIZE}');"
    for s in SOURCES
) + (
    # The watermark of each source: the last row indexed, and when it was written
    # (what tells the same row from another one with the same id after a restore).
    "CREATE TABLE IF NOT EXISTS indexed ("
    " base TEXT PRIMARY KEY, last_id INTEGER NOT NULL, last_created_at REAL);"
)


def index_path(db_path: Path) -> Path:
    """``lcm.db`` -> ``lcm-fts.db``, beside it (backed up and restored with it)."""
    return db_path.with_name(f"{db_path.stem}-fts{db_path.suffix}")


def readonly_uri(path: Path) -> str:
    """A ``file:`` URI that attaches ``path`` read-only (the connection needs ``uri=True``)."""
    return path.resolve().as_uri() + "?mode=ro"


def attach_readonly(conn: apsw.Connection, path: Path) -> bool:
    """Attach the index read-only as ``ATTACHED_AS``; False when it does not exist yet.

    Read-only, so a store's ``BEGIN IMMEDIATE`` (which takes a write lock on
    every database attached for writing) never touches the index's lock.
    """
    if not path.is_file():
        return False
    conn.execute(f"ATTACH DATABASE ? AS {ATTACHED_AS}", (readonly_uri(path),))
    return True


@dataclass
class CatchUp:
    """What one pass did: rows indexed per base table, and the tables indexed again."""

    indexed: dict[str, int] = field(default_factory=dict)
    restarted: list[str] = field(default_factory=list)


class FullTextIndex:
    """The index file of one lcm.db, its writing connection and optional thread."""

    def __init__(self, db_path: Path, busy_timeout_ms: int) -> None:
        self.db_path = Path(db_path)
        self.path = index_path(self.db_path)
        self._lock = threading.Lock()
        self._due = threading.Event()
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self._seen: tuple[int, ...] | None = None  # lcm.db's newest ids at the last pass
        try:
            self._conn = connect(self.path, busy_timeout_ms=busy_timeout_ms, uri=True)
        except apsw.Error as exc:
            raise RuntimeFailure(f"LCM full-text index {self.path}: {exc}") from exc
        try:
            self._conn.execute(SCHEMA)
            # lcm.db read-only: BEGIN IMMEDIATE then locks the index alone.
            self._conn.execute("ATTACH DATABASE ? AS lcm", (readonly_uri(self.db_path),))
        except apsw.Error as exc:
            self._conn.close()
            raise RuntimeFailure(f"LCM full-text index {self.path}: {exc}") from exc

    # -- passes --------------------------------------------------------------

    @property
    def running(self) -> bool:
        """Whether a thread keeps the index up (else writers catch up after they commit)."""
        return self._thread is not None

    def catch_up(self) -> CatchUp:
        """Index every row lcm.db committed since the last pass (see the module docstring)."""
        with self._lock:
            return self._pass(restart=False)

    def rebuild(self) -> CatchUp:
        """Drop every posting and index lcm.db again from its first row (one transaction)."""
        with self._lock:
            return self._pass(restart=True)

    def _pass(self, restart: bool) -> CatchUp:
        conn, done = self._conn, CatchUp()
        newest = self._newest_ids()
        if newest == self._seen and not restart:
            return done  # nothing committed since: no write transaction, no lock
        # One snapshot of lcm.db for the whole pass; the write lock of the index only
        # (lcm.db is attached read-only), waited for like any writer's.
        conn.execute("BEGIN IMMEDIATE")
        try:
            for source in SOURCES:
                self._catch_up_source(conn, source, restart, done)
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")
        self._seen = newest  # read before the pass: at worst the next one looks again
        return done

    def _newest_ids(self) -> tuple[int, ...]:
        row = self._conn.execute(
            "SELECT "
            + ", ".join(f"(SELECT coalesce(max(id), 0) FROM lcm.{s.base})" for s in SOURCES)
        ).fetchone()
        assert row is not None, "a SELECT of scalar subqueries returns one row"
        return tuple(int(value) for value in row)

    def _catch_up_source(
        self, conn: apsw.Connection, source: Source, restart: bool, done: CatchUp
    ) -> None:
        row = conn.execute(
            "SELECT last_id, last_created_at FROM indexed WHERE base = ?", (source.base,)
        ).fetchone()
        last_id = int(row[0]) if row else 0
        if last_id and not restart:
            at = conn.execute(
                f"SELECT created_at FROM lcm.{source.base} WHERE id = ?", (last_id,)
            ).fetchone()
            restart = at is None or at[0] != row[1]  # type: ignore[index]
            if restart:
                done.restarted.append(source.base)
        if restart:
            conn.execute(f"INSERT INTO {source.table}({source.table}) VALUES ('delete-all')")
            last_id = 0
        conn.execute(
            f"INSERT INTO {source.table}(rowid, content) "
            f"SELECT id, {source.text} FROM lcm.{source.base} WHERE id > ? ORDER BY id",
            (last_id,),
        )
        done.indexed[source.base] = conn.changes()
        newest = conn.execute(
            f"SELECT id, created_at FROM lcm.{source.base} ORDER BY id DESC LIMIT 1"
        ).fetchone()
        conn.execute(
            "INSERT OR REPLACE INTO indexed(base, last_id, last_created_at) VALUES (?, ?, ?)",
            (source.base, *(newest if newest else (0, None))),
        )

    def integrity_problems(self) -> dict[str, str]:
        """FTS5's own ``integrity-check`` of each table: table -> "ok" or the error."""
        result = {}
        with self._lock:
            for source in SOURCES:
                try:
                    self._conn.execute(
                        f"INSERT INTO {source.table}({source.table}, rank) "
                        "VALUES ('integrity-check', 1)"
                    )
                    result[source.table] = "ok"
                except apsw.Error as exc:
                    result[source.table] = str(exc)
        return result

    # -- the thread ----------------------------------------------------------

    def start(self, interval: float = INDEX_INTERVAL_SECONDS) -> None:
        """Catch up every ``interval`` seconds (or when woken) on a thread of its own."""
        if self._thread is None:
            self._thread = threading.Thread(
                target=self._run, args=(interval,), name="lcm-fulltext", daemon=True
            )
            self._thread.start()

    def wake(self) -> None:
        self._due.set()

    def _run(self, interval: float) -> None:
        wait, failed = interval, 0
        backoff = Backoff(
            first=min(interval * 2, FAILED_PASS_WAIT_SECONDS), cap=FAILED_PASS_WAIT_SECONDS
        )
        while not self._stopping.is_set():
            self._due.wait(wait)
            self._due.clear()
            if self._stopping.is_set():
                return
            try:
                self.catch_up()
            except (apsw.Error, RuntimeFailure) as exc:
                # A disk full or a damaged file fails every pass: wait twice as long each
                # time (at most FAILED_PASS_WAIT_SECONDS), so the log is not flooded.
                wait, failed = backoff.delay(failed), failed + 1
                logger.warning(
                    "LCM: full-text index %s: catch-up failed (next try in %.1f s): %s",
                    self.path,
                    wait,
                    exc,
                )
            else:
                wait, failed = interval, 0

    def close(self, catch_up: bool = True) -> None:
        """Stop the thread, index what is left (``catch_up``), close the connection."""
        self._stopping.set()
        self._due.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        try:
            if catch_up:
                self.catch_up()
        finally:
            with self._lock:
                self._conn.close()


SNIPPETS = "lcm_snippets"  # a TEMP table of the searching connection


def snippets(conn: apsw.Connection, query: str, texts: dict[int, str]) -> dict[int, str]:
    """FTS5's ``snippet()`` of each text for ``query`` (id -> snippet).

    The index holds no text (``content=''``), so ``snippet()`` has nothing to
    cut from. The few texts a search returns are indexed again in a TEMP
    table of this connection with the same tokenizer: the same function
    then gives the same snippet it gave over lcm.db's own index (a TEMP
    table is writable on a read-only connection too).
    """
    if not texts:
        return {}
    conn.execute(
        f"CREATE VIRTUAL TABLE IF NOT EXISTS temp.{SNIPPETS} "
        f"USING fts5(content, tokenize='{TOKENIZE}')"
    )
    # The rows live only inside a savepoint rolled back at once: no DELETE (which
    # would tokenize every text again), and it nests in a caller's transaction.
    conn.execute("SAVEPOINT lcm_snippets")
    try:
        conn.executemany(
            f"INSERT INTO temp.{SNIPPETS}(rowid, content) VALUES (?, ?)", list(texts.items())
        )
        rows = fetch_all(
            conn,
            f"SELECT rowid, snippet({SNIPPETS}, 0, '[', ']', ' ... ', 24) "
            f"FROM temp.{SNIPPETS} WHERE {SNIPPETS} MATCH ?",
            (query,),
        )
    finally:
        conn.execute("ROLLBACK TO lcm_snippets; RELEASE lcm_snippets")
    return {int(rowid): str(snippet) for rowid, snippet in rows}
