"""Storage: messages come back byte-identical, big outputs leave the database."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

import apsw
import pytest
from support.lcm_conversations import blob

from hermes_runtime.common.errors import RuntimeFailure
from hermes_runtime.common.sqlite import connect
from hermes_runtime.lcm.store import dag, messagereads
from hermes_runtime.lcm.store.batchrows import ROWS_PER_STATEMENT
from hermes_runtime.lcm.store.checkpoints import Checkpointer
from hermes_runtime.lcm.store.dag import NewSummary
from hermes_runtime.lcm.store.lcmstore import LcmStore
from hermes_runtime.lcm.store.schema import MIGRATIONS, fetch_all, fetch_value, schema_version


def test_roundtrip_keeps_every_key_and_byte(store: LcmStore) -> None:
    originals: list[dict[str, Any]] = [
        {"role": "user", "content": "héllo ✓ \x00 nul and emoji 🚀", "name": "alice"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
            ],
            "reasoning": "thinking...",
        },
        {"role": "tool", "tool_call_id": "c1", "content": "ok"},
        {"role": "user", "content": [{"type": "text", "text": "parts"}]},
    ]
    stored = store.ingest_many("s", originals)
    assert [messagereads.full_message(store, m) for m in stored] == originals
    assert [m.seq for m in stored] == [1, 2, 3, 4]


def test_large_output_is_externalized_atomically(store: LcmStore, tmp_path: Path) -> None:
    big = "line of tool output\n" * 500
    message = store.ingest("s", {"role": "tool", "tool_call_id": "c", "content": big})
    assert message.output_id is not None
    assert message.content is not None and len(message.content) < 1_500
    assert message.output_id in message.content and "lcm_read_output" in message.content
    files = [p for p in (tmp_path / "outputs").rglob("*") if p.is_file()]
    assert len(files) == 1 and files[0].read_text() == big
    assert not [p for p in files if p.name.endswith(".tmp")]
    assert messagereads.full_message(store, message)["content"] == big


def test_base64_blob_never_enters_the_database(store: LcmStore, tmp_path: Path) -> None:
    image = blob(3_000)
    content = [{"type": "image_url", "image_url": {"url": f"data:image/png;base64,{image}"}}]
    message = store.ingest("s", {"role": "user", "content": content})
    store.close()
    raw = b"".join(p.read_bytes() for p in tmp_path.glob("lcm.db*"))
    assert image[:200].encode() not in raw
    reopened = LcmStore(tmp_path / "lcm.db", tmp_path / "outputs")
    again = messagereads.message(reopened, message.id)
    assert again is not None and messagereads.full_message(reopened, again)["content"] == content
    reopened.close()


def test_a_base64_run_is_externalized_from_its_first_long_enough_run() -> None:
    from hermes_runtime.lcm.store.outputs import BASE64_RUN_CHARS, needs_externalizing

    run = "QUJD" * (BASE64_RUN_CHARS // 4)
    assert needs_externalizing("see: " + run + " end", 16_000)
    assert not needs_externalizing("see: " + run[:-1] + " end", 16_000)
    assert not needs_externalizing("plain words " * 80, 16_000)
    assert needs_externalizing("w" * 16_001, 16_000)


def test_same_output_is_stored_once(store: LcmStore, tmp_path: Path) -> None:
    big = "x" * 5_000
    first = store.ingest("a", {"role": "tool", "tool_call_id": "1", "content": big})
    second = store.ingest("b", {"role": "tool", "tool_call_id": "2", "content": big})
    assert first.output_id == second.output_id
    assert store.counts()["outputs"] == 1


def test_messages_are_immutable(store: LcmStore) -> None:
    message = store.ingest("s", {"role": "user", "content": "fixed"})
    with pytest.raises(apsw.ConstraintError):
        store.conn.execute("UPDATE messages SET content = 'changed' WHERE id = ?", (message.id,))
    with pytest.raises(apsw.ConstraintError):
        store.conn.execute("DELETE FROM messages WHERE id = ?", (message.id,))


def test_migrations_are_recorded_and_idempotent(tmp_path: Path) -> None:
    first = LcmStore(tmp_path / "lcm.db")
    assert schema_version(first.conn) == len(MIGRATIONS)
    first.ingest("s", {"role": "user", "content": "kept"})
    first.close()
    second = LcmStore(tmp_path / "lcm.db")
    assert second.counts()["messages"] == 1
    assert fetch_value(second.conn, "PRAGMA journal_mode") == "wal"
    second.close()


@pytest.mark.parametrize("readonly", [False, True], ids=["read-write", "read-only"])
def test_newer_schema_is_refused_with_the_path(tmp_path: Path, readonly: bool) -> None:
    LcmStore(tmp_path / "lcm.db").close()
    conn = apsw.Connection(str(tmp_path / "lcm.db"))
    conn.execute("PRAGMA user_version = 999")
    conn.close()
    with pytest.raises(RuntimeFailure, match=r"lcm\.db.*999.*newer"):
        LcmStore(tmp_path / "lcm.db", readonly=readonly)


@pytest.mark.parametrize("bad", [{"content": "no role"}, {"role": 3, "content": "x"}, "not a dict"])
def test_bad_message_is_rejected_and_nothing_is_stored(store: LcmStore, bad: object) -> None:
    good = {"role": "user", "content": "fine"}
    with pytest.raises(RuntimeFailure, match="role"):
        store.ingest_many("s", [good, bad])  # type: ignore[list-item]
    assert store.counts()["messages"] == 0


def test_ingest_queues_embeddings_and_fts(store: LcmStore) -> None:
    store.ingest("s", {"role": "user", "content": "zebra crossing"})
    assert store.counts()["embed_queue"] == 1
    rows = fetch_all(
        store.searchable(), "SELECT rowid FROM fts.messages_fts WHERE messages_fts MATCH 'zebra'"
    )
    assert len(rows) == 1
    assert json.loads(json.dumps(store.counts()))["messages"] == 1


def test_a_batch_is_stored_with_a_few_statements_of_a_fixed_set(store: LcmStore) -> None:
    """Not a statement a row, nor a statement text for every batch size.

    A multi-row INSERT the size of each batch made a new text for nearly every
    batch, and compiling those pushed the store's other statements out of apsw's
    statement cache. Chunks of a power of two rows: 40 rows are 32 + 8, 63 are
    32 + 16 + 8 + 4 + 2 + 1. Every row comes back as the batch returned it (ids in
    order, exact write time), its context item and embedding job included.
    """
    statements: list[str] = []

    def trace(_cursor: apsw.Cursor, sql: str, _bindings: Any) -> bool:
        statements.append(sql)
        return True

    store.ingest_many("s", [{"role": "user", "content": "warm up"}])
    chunks_by_size = {}
    for size in (1, 40, 63):
        statements.clear()
        store.conn.exec_trace = trace
        batch = [{"role": "user", "content": f'row {n} "quoted"\n✓'} for n in range(size)]
        stored = store.ingest_many("s", batch, created_at=1764878400.123456789)
        store.conn.exec_trace = None
        inserts = [sql for sql in statements if sql.startswith("INSERT")]
        chunks_by_size[size] = [
            sql.count("), (") + 1 for sql in inserts if sql.startswith("INSERT INTO messages")
        ]
        assert len(inserts) == 2 * len(chunks_by_size[size]) + 1  # + the embedding queue's
        assert [messagereads.message(store, m.id) for m in stored] == stored
        assert [m.id for m in stored] == list(range(stored[0].id, stored[0].id + size))
        assert [messagereads.full_message(store, m)["content"] for m in stored] == [
            m["content"] for m in batch
        ]
    assert chunks_by_size == {1: [1], 40: [32, 8], 63: [32, 16, 8, 4, 2, 1]}
    items = fetch_all(store.conn, "SELECT message_id FROM context_items ORDER BY position")
    assert [r[0] for r in items] == list(range(1, 106))
    assert store.counts()["embed_queue"] == 105


def test_a_batch_longer_than_a_statement_carries_is_stored_whole_and_in_order(
    store: LcmStore,
) -> None:
    size = ROWS_PER_STATEMENT * 2 + 3
    batch = [{"role": "user", "content": f"message {n}"} for n in range(size)]
    stored = store.ingest_many("s", batch)
    assert [m.seq for m in stored] == list(range(1, size + 1))
    assert [messagereads.full_message(store, m)["content"] for m in stored] == [
        m["content"] for m in batch
    ]
    items = fetch_all(store.conn, "SELECT position, message_id FROM context_items ORDER BY 1")
    assert items == [(m.seq, m.id) for m in stored]


def test_a_run_replaced_by_a_summary_is_returned_as_stored(store: LcmStore) -> None:
    """``replace_run`` builds the summary it wrote instead of reading it back: same record."""
    stored = store.ingest_many("s", [{"role": "user", "content": f"m{n}"} for n in range(6)])
    leaf = dag.replace_run(
        store,
        "s",
        [1, 2, 3],
        NewSummary(0, "first three", 3, 9, 1, [("message", m.id) for m in stored[:3]]),
    )
    assert leaf is not None and leaf == dag.summary(store, leaf.id)
    assert (leaf.first_seq, leaf.last_seq, leaf.message_count) == (1, 3, 3)
    assert (leaf.start_at, leaf.end_at) == (stored[0].created_at, stored[2].created_at)
    condensed = dag.replace_run(
        store,
        "s",
        [1, 4],
        NewSummary(1, "all four", 2, 5, 2, [("summary", leaf.id), ("message", stored[3].id)]),
    )
    assert condensed is not None and condensed == dag.summary(store, condensed.id)
    assert (condensed.first_seq, condensed.last_seq, condensed.message_count) == (1, 4, 4)


def test_summary_sessions_names_the_session_of_each_summary_that_exists(store: LcmStore) -> None:
    made = {}
    for session in ("a", "b"):
        stored = store.ingest_many(session, [{"role": "user", "content": "x"}] * 2)
        sources = [("message", m.id) for m in stored]
        made[session] = dag.replace_run(
            store, session, [1, 2], NewSummary(0, "s", 1, 2, 1, sources)
        )
    a, b = made["a"], made["b"]
    assert a is not None and b is not None
    assert dag.summary_sessions(store, [b.id, a.id, 999]) == {a.id: "a", b.id: "b"}
    assert dag.summary_sessions(store, []) == {}


def commit_rows(conn: apsw.Connection, count: int) -> None:
    """``count`` transactions of one ~3 kB row each (a page or so of WAL each)."""
    for index in range(count):
        with conn:
            conn.execute(
                "INSERT INTO outputs(id, sha256, size, encoding, relpath, created_at) "
                "VALUES (?, ?, 1, 'text', 'x', 0)",
                (f"out_{index}", "x" * 3_000 + str(index)),
            )


def test_background_checkpoints_take_over_from_the_committing_writer(tmp_path: Path) -> None:
    """Commits only wake the checkpoint thread; it checkpoints, and nothing is lost."""
    db = tmp_path / "lcm.db"
    LcmStore(db).close()  # the schema, in WAL mode
    writer, checkpointing = connect(db, wal=False), connect(db, wal=False)
    checkpointer = Checkpointer(lambda: checkpointing, checkpointing.close, pages=20)
    writer.execute("PRAGMA wal_autocheckpoint = 5")  # SQLite's own: replaced by the hook
    checkpointer.start()
    checkpointer.install(writer)
    try:
        commit_rows(writer, 200)
        deadline = time.monotonic() + 30
        while checkpointer.checkpoints == 0 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert checkpointer.checkpoints > 0
    finally:
        checkpointer.stop()
    reader = connect(db, readonly=True)
    assert reader.execute("SELECT count(*) FROM outputs").fetchone()[0] == 200
    reader.close()
    writer.close()


def test_without_the_thread_commits_leave_the_wal_to_it(tmp_path: Path) -> None:
    """With the hook installed, a commit never checkpoints itself: the WAL only grows."""
    db = tmp_path / "lcm.db"
    LcmStore(db).close()
    writer = connect(db, wal=False)
    checkpointer = Checkpointer(lambda: writer, lambda: None, pages=1_000_000)
    checkpointer.start()
    checkpointer.install(writer)
    try:
        commit_rows(writer, 500)
        wal_frames, _ = writer.wal_checkpoint(mode=apsw.SQLITE_CHECKPOINT_PASSIVE)
        assert wal_frames > 1_000  # past SQLite's autocheckpoint threshold, never reset
        assert checkpointer.checkpoints == 0
    finally:
        checkpointer.stop()
        writer.close()


def test_a_checkpointer_never_started_leaves_sqlite_its_own_checkpoints(tmp_path: Path) -> None:
    """Built but not started (``start_background`` not called), it takes nothing over.

    Its constructor starts no thread (issue 31), so ``install`` before ``start``
    must not replace SQLite's autocheckpoint with a hook no thread answers: the
    WAL would only grow.
    """
    db = tmp_path / "lcm.db"
    LcmStore(db).close()
    writer = connect(db, wal=False)
    writer.execute("PRAGMA wal_autocheckpoint = 50")
    checkpointer = Checkpointer(lambda: writer, lambda: None, pages=1_000_000)
    checkpointer.install(writer)
    try:
        commit_rows(writer, 500)
        wal_frames, _ = writer.wal_checkpoint(mode=apsw.SQLITE_CHECKPOINT_PASSIVE)
        assert wal_frames < 200  # SQLite checkpointed every ~50 pages and restarted the WAL
    finally:
        checkpointer.stop()  # never started: nothing to join
        writer.close()


def test_opening_a_store_starts_no_thread_until_start_background(tmp_path: Path) -> None:
    """The gateway's store options build the checkpointer and the queue; threads wait."""
    before = set(threading.enumerate())
    store = LcmStore(tmp_path / "lcm.db", background_checkpoints=True, commit_interval=0.05)
    try:
        assert set(threading.enumerate()) - before == set()
        store.ingest("s", {"role": "user", "content": "committed without any thread"})
        assert set(threading.enumerate()) - before == set()
        store.start_background()
        started = {t.name for t in set(threading.enumerate()) - before}
        assert started == {"lcm-checkpoint", "lcm-fulltext"}
    finally:
        store.stop_group_commit()
        store.stop_fulltext()
        store.stop_checkpoints()
        store.close()
