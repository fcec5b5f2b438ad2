"""LCM opens only LCM databases: every verb leaves another SQLite file byte for byte as it was.

The finding this guards: ``lcm stats --db <Hermes' state.db copy>`` created
the LCM schema inside it, and on a Hermes-like file failed on "table
sessions already exists" after switching it to WAL. Read verbs now open
read-only and refuse a file without the LCM schema (or with a newer one);
only ``import`` and the engine create the schema, only in a new file.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import apsw
import pytest

from hermes_runtime.cli import main
from hermes_runtime.lcm.config import LcmConfig
from hermes_runtime.lcm.engine.lcmengine import LcmEngine
from hermes_runtime.lcm.store.lcmstore import LcmStore
from hermes_runtime.lcm.store.schema import NotAnLcmDatabase

READ_VERBS: list[list[str]] = [
    ["context", "--session", "s1", "--budget", "500"],
    ["grep", "hello"],
    ["grep", "--regex", "hel+o"],
    ["search", "--mode", "fts", "hello"],
    ["search", "hello"],
    ["expand", "msg_1"],
    ["stats"],
    ["doctor"],
    ["doctor", "--full"],
]
WRITE_VERBS: list[list[str]] = [
    ["doctor", "--fix"],
    ["doctor", "--rebuild-fts"],
    ["import", "--hermes-state", "{state}"],
    ["import", "--session", "s1", "{jsonl}"],
]


def hermes_like(path: Path, journal: str) -> Path:
    """A database shaped like Hermes' state.db (a ``sessions`` and a ``messages`` table)."""
    conn = apsw.Connection(str(path))
    conn.execute(f"PRAGMA journal_mode = {journal}")
    conn.execute(
        "CREATE TABLE sessions (id TEXT PRIMARY KEY, source TEXT);"
        "CREATE TABLE messages (id INTEGER PRIMARY KEY, session_id TEXT, role TEXT, "
        "content TEXT, tool_call_id TEXT, tool_calls TEXT, tool_name TEXT, timestamp REAL);"
        "INSERT INTO sessions VALUES ('s1', 'cli');"
        "INSERT INTO messages(session_id, role, content, timestamp) "
        "VALUES ('s1', 'user', 'hello there', 1.0);"
    )
    if journal == "wal":
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    return path


def fingerprint(path: Path) -> tuple[str, str]:
    """sha256 of the file and its journal mode, read without changing either."""
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    conn = apsw.Connection(str(path), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        mode = str(conn.execute("PRAGMA journal_mode").fetchone()[0])
    finally:
        conn.close()
    return digest, mode


def lcm_database(path: Path) -> Path:
    """A small LCM database, checkpointed: everything in the main file."""
    store = LcmStore(path)
    store.ingest("s1", {"role": "user", "content": "hello world"})
    store.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    store.close()
    return path


def run_cli(argv: list[str]) -> int:
    try:
        return main(argv)
    except SystemExit as exc:
        return int(exc.code or 0)


@pytest.mark.parametrize("journal", ["delete", "wal"])
def test_no_verb_changes_a_foreign_database(
    tmp_path: Path, journal: str, capsys: pytest.CaptureFixture[str]
) -> None:
    foreign = hermes_like(tmp_path / "state.db", journal)
    source = hermes_like(tmp_path / "source-state.db", journal)
    jsonl = tmp_path / "chat.jsonl"
    jsonl.write_text(json.dumps({"role": "user", "content": "hi"}) + "\n")
    before = fingerprint(foreign)
    assert before[1] == journal
    for verb in READ_VERBS + WRITE_VERBS:
        argv = [part.format(state=source, jsonl=jsonl) for part in verb]
        code = run_cli(["lcm", argv[0], "--db", str(foreign), *argv[1:]])
        err = capsys.readouterr().err
        assert code == 1, (verb, err)
        assert str(foreign) in err and "not an LCM database" in err, (verb, err)
        assert "Traceback" not in err
        assert fingerprint(foreign) == before, f"lcm {' '.join(verb)} changed {foreign}"


def test_the_engine_refuses_a_foreign_database(tmp_path: Path) -> None:
    foreign = hermes_like(tmp_path / "lcm.db", "delete")
    before = fingerprint(foreign)
    with pytest.raises(NotAnLcmDatabase, match="not an LCM database"):
        LcmEngine(LcmConfig.for_home(tmp_path, {"embeddings": "off"}))
    assert fingerprint(foreign) == before


def test_read_verbs_create_nothing_and_refuse_a_missing_or_empty_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "nope" / "lcm.db"
    empty = tmp_path / "empty.db"
    empty.write_bytes(b"")
    for verb in [*READ_VERBS, ["doctor", "--fix"]]:
        for db, says in ((missing, "no such file"), (empty, "no LCM schema")):
            code = run_cli(["lcm", verb[0], "--db", str(db), *verb[1:]])
            err = capsys.readouterr().err
            assert code == 1 and str(db) in err and says in err, (verb, err)
    assert not missing.parent.exists()
    assert empty.read_bytes() == b""


def test_read_verbs_refuse_a_newer_schema_and_leave_it_alone(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = lcm_database(tmp_path / "lcm.db")
    conn = apsw.Connection(str(db))
    conn.execute("PRAGMA user_version = 99")
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    before = fingerprint(db)
    for verb in READ_VERBS:
        code = run_cli(["lcm", verb[0], "--db", str(db), *verb[1:]])
        err = capsys.readouterr().err
        assert code == 1 and "schema version 99 is newer" in err and str(db) in err, (verb, err)
    assert fingerprint(db) == before


def test_read_verbs_write_nothing_to_an_lcm_database(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = lcm_database(tmp_path / "lcm.db")
    before = fingerprint(db)
    for verb in READ_VERBS:
        code = run_cli(["lcm", verb[0], "--db", str(db), "--json", *verb[1:]])
        out = capsys.readouterr()
        assert code == 0, (verb, out.err)
    assert fingerprint(db) == before
    wal = Path(f"{db}-wal")
    assert not wal.exists() or wal.stat().st_size == 0
