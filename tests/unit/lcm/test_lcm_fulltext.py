"""The full-text index in its own file: built, kept up, and mended against lcm.db.

Every test uses real files: lcm.db, lcm-fts.db beside it, copies of both
taken the way a backup or an operator would take them.
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import apsw
import pytest

from hermes_runtime.common.errors import RuntimeFailure
from hermes_runtime.common.sqlite import connect
from hermes_runtime.lcm.config import LcmConfig
from hermes_runtime.lcm.engine.lcmengine import LcmEngine
from hermes_runtime.lcm.ops.doctor import doctor
from hermes_runtime.lcm.search.textsearch import grep
from hermes_runtime.lcm.store import messagereads
from hermes_runtime.lcm.store.fulltext import index_path
from hermes_runtime.lcm.store.lcmstore import LcmStore
from hermes_runtime.lcm.store.schema import MIGRATIONS, fetch_all, schema_version


def words(store: LcmStore, query: str) -> list[str]:
    """The stored text of every message grep finds for ``query``."""
    found = []
    for hit in grep(store, query, limit=50):
        if hit.kind == "message":
            message = messagereads.message(store, int(hit.id.split("_", 1)[1]))
            assert message is not None
            found.append(str(message.content))
    return sorted(found)


def tables(db: Path) -> set[str]:
    conn = apsw.Connection(str(db), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        return {str(row[0]) for row in conn.execute("SELECT name FROM sqlite_master")}
    finally:
        conn.close()


def copy_database(db: Path, to: Path) -> None:
    """A consistent copy of a live database (SQLite's backup API, as dbsnap takes one)."""
    source = apsw.Connection(str(db), flags=apsw.SQLITE_OPEN_READONLY)
    target = apsw.Connection(str(to))
    with target.backup("main", source, "main") as copy:
        copy.step()
    target.close()
    source.close()


def restore(copy: Path, db: Path) -> None:
    for suffix in ("-wal", "-shm"):
        Path(str(db) + suffix).unlink(missing_ok=True)
    shutil.copyfile(copy, db)


def test_postings_live_beside_lcm_db_never_inside_it(store: LcmStore) -> None:
    store.ingest("s", {"role": "user", "content": "the quokka smiles"})
    assert grep(store, "quokka")[0].snippet == "the [quokka] smiles"
    assert not any("fts" in name for name in tables(store.db_path))
    assert {"messages_fts", "summaries_fts", "indexed"} <= tables(index_path(store.db_path))
    assert store.fulltext_path == store.db_path.with_name("lcm-fts.db")


def test_a_version_3_database_moves_its_postings_into_the_index_file(tmp_path: Path) -> None:
    db = tmp_path / "lcm.db"
    conn = connect(db)
    for step in MIGRATIONS[:3]:
        conn.execute(step)
    conn.execute("PRAGMA user_version = 3")
    conn.execute("INSERT INTO sessions(id, created_at, next_seq) VALUES ('old', 1.0, 2)")
    conn.execute(
        "INSERT INTO messages(session_id, seq, role, content, token_count, created_at) "
        "VALUES ('old', 1, 'user', 'a platypus from the old release', 9, 1.0)"
    )
    assert conn.execute("SELECT count(*) FROM messages_fts").fetchone() == (1,)
    conn.close()

    store = LcmStore(db, tmp_path / "outputs")
    assert schema_version(store.conn) == len(MIGRATIONS) == 4
    assert not any("fts" in name or name.endswith("_ai") for name in tables(db))
    assert words(store, "platypus") == ["a platypus from the old release"]
    assert doctor(store).ok
    store.stop_fulltext()
    store.close()


def test_the_gateway_indexes_on_its_own_thread_and_a_reader_sees_it(tmp_path: Path) -> None:
    config = LcmConfig.for_home(tmp_path, {"embeddings": "off"})
    engine = LcmEngine(config, start_worker=True)
    engine.start_background()
    try:
        assert engine.store.fulltext is not None and engine.store.fulltext.running
        engine.store.ingest("s", {"role": "user", "content": "an okapi in the forest"})
        reader = LcmStore(config.db_path, readonly=True)
        deadline = time.monotonic() + 30
        while not words(reader, "okapi") and time.monotonic() < deadline:
            time.sleep(0.05)  # the indexer's next pass, within its interval
        assert words(reader, "okapi") == ["an okapi in the forest"]
        engine.store.ingest("s", {"role": "user", "content": "a second okapi, just stored"})
        # The engine's own search catches up first: a tool finds the turn just stored.
        assert len(words(engine.store, "okapi")) == 2
        reader.close()
    finally:
        engine.close()
    assert engine.store.fulltext is None  # closed: its last pass indexed everything


def test_an_index_ahead_of_a_restored_database_starts_again(tmp_path: Path) -> None:
    """A backup that copied lcm.db before lcm-fts.db: the index holds rows lcm.db lost."""
    db = tmp_path / "lcm.db"
    store = LcmStore(db, tmp_path / "outputs")
    store.ingest_many("s", [{"role": "user", "content": f"alpha {n}"} for n in range(3)])
    copy_database(db, tmp_path / "lcm.copy")
    store.ingest_many("s", [{"role": "user", "content": f"bravo lost {n}"} for n in range(2)])
    assert len(words(store, "bravo")) == 2
    store.stop_fulltext()
    store.close()

    restore(tmp_path / "lcm.copy", db)  # the index file stays as it was, ahead
    store = LcmStore(db, tmp_path / "outputs")
    assert words(store, "bravo") == []
    # The new rows take the ids the lost ones had: their postings must be theirs.
    store.ingest_many("s", [{"role": "user", "content": f"charlie new {n}"} for n in range(2)])
    assert words(store, "bravo") == []
    assert words(store, "charlie") == ["charlie new 0", "charlie new 1"]
    assert len(words(store, "alpha")) == 3
    assert doctor(store, full=True).ok
    store.stop_fulltext()
    store.close()


def test_an_index_of_another_database_starts_again(tmp_path: Path) -> None:
    """Same ids, other rows: the row at the watermark is not the one indexed."""
    first, second = tmp_path / "a" / "lcm.db", tmp_path / "b" / "lcm.db"
    for db, word in ((first, "delta"), (second, "echo")):
        store = LcmStore(db, db.parent / "outputs")
        store.ingest_many("s", [{"role": "user", "content": f"{word} {n}"} for n in range(4)])
        store.stop_fulltext()
        store.close()
    shutil.copyfile(index_path(first), index_path(second))  # a.db's postings beside b.db

    store = LcmStore(second, second.parent / "outputs")
    assert words(store, "delta") == []
    assert words(store, "echo") == [f"echo {n}" for n in range(4)]
    store.stop_fulltext()
    store.close()


def test_a_missing_index_is_named_by_readers_and_built_by_a_writer(tmp_path: Path) -> None:
    db = tmp_path / "lcm.db"
    store = LcmStore(db, tmp_path / "outputs")
    store.ingest("s", {"role": "user", "content": "a narwhal surfaces"})
    store.stop_fulltext()
    store.close()
    for suffix in ("", "-wal", "-shm"):
        Path(str(index_path(db)) + suffix).unlink(missing_ok=True)

    reader = LcmStore(db, readonly=True)
    with pytest.raises(RuntimeFailure, match=r"lcm-fts\.db: no such file"):
        grep(reader, "narwhal")
    report = doctor(reader)
    assert not report.ok and report.checks["fulltext_index"] == "missing"

    writer = LcmStore(db, tmp_path / "outputs")  # a writable open builds it
    assert words(reader, "narwhal") == ["a narwhal surfaces"]
    assert doctor(reader, full=True).ok
    writer.stop_fulltext()
    writer.close()
    reader.close()


def test_a_writer_without_a_thread_indexes_its_own_commits(store: LcmStore) -> None:
    store.ingest("s", {"role": "user", "content": "a wombat digs"})
    conn = connect(index_path(store.db_path), readonly=True)
    rows = fetch_all(conn, "SELECT base, last_id FROM indexed ORDER BY base")
    conn.close()
    assert rows == [("messages", 1), ("summaries", 0)]
