"""Real processes on one real LCM database file: the failures LCM's peers met in production.

- hermes-lcm #480: several processes starting at once on one database failed
  10/10 (each saw version 0 and created the schema; all but one died on
  "table sessions already exists").
- hermes-lcm #601: a live database corrupted by a migration running beside
  readers and writers.
- hermes-lcm #421: "database is locked" with the vector store on.
- hermes-lcm #588: helpers opening the database file a second time dropped
  SQLite's POSIX locks ("disk I/O error", a deleted WAL).
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import apsw
from fakes.fixtures import FakeLLM
from lcm_testlib import Gateway, gateway_config, rows_when

from hermes_runtime.lcm.config import LcmConfig
from hermes_runtime.lcm.embed.embedbatch import embed_all
from hermes_runtime.lcm.embed.embedders import offline_embedder
from hermes_runtime.lcm.engine.lcmengine import LcmEngine
from hermes_runtime.lcm.store import sessions
from hermes_runtime.lcm.store.lcmstore import LcmStore
from hermes_runtime.lcm.store.schema import MIGRATIONS, fetch_all, schema_version

WORKER = Path(__file__).with_name("lcm_worker.py")


def start_together(tmp_path: Path, roles: list[list[str]]) -> list[dict[str, Any]]:
    """Start every worker, release them at once (a go file), and collect their JSON lines."""
    go = tmp_path / "go"
    workers = [
        subprocess.Popen(
            [sys.executable, str(WORKER), str(go), *role],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for role in roles
    ]
    deadline = time.monotonic() + 120
    while len(list(tmp_path.glob("go.*.ready"))) < len(workers):
        assert time.monotonic() < deadline, "workers never got ready"
        assert all(w.poll() is None for w in workers), "a worker died before the start"
        time.sleep(0.01)
    go.touch()
    results = []
    for role, worker in zip(roles, workers, strict=True):
        out, err = worker.communicate(timeout=300)
        assert worker.returncode == 0, f"{role}: exit {worker.returncode}\n{err[-3000:]}"
        results.append(json.loads(out.strip().splitlines()[-1]))
    return results


def integrity(db: Path) -> str:
    conn = apsw.Connection(str(db), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        return str(conn.execute("PRAGMA integrity_check").fetchall()[0][0])
    finally:
        conn.close()


def chat_at_go(gateway: Gateway, go: Path, text: str) -> tuple[threading.Thread, list[str]]:
    """A thread that sends one chat turn to the gateway the moment ``go`` appears.

    The gateway's LCM engine opens ``lcm.db`` lazily, for its first agent:
    the turn makes the gateway open the fresh file with the other processes.
    """
    answers: list[str] = []

    def run() -> None:
        deadline = time.monotonic() + 120
        while not go.exists() and time.monotonic() < deadline:
            time.sleep(0.002)
        answers.append(gateway.chat(text).text)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, answers


def test_processes_starting_at_once_on_a_fresh_database(
    tmp_path: Path, make_gateway: Any, fake_llm: FakeLLM
) -> None:
    gateway = make_gateway(gateway_config(fake_llm, {}))
    gateway.start()  # the real Hermes gateway (hermes-runtime agent run), lcm.db not opened yet
    db = gateway.db_path
    assert not db.exists()
    turn = "The gateway's first turn names pier amaranth-41."
    chatting, answers = chat_at_go(gateway, tmp_path / "go", turn)
    jsonl = tmp_path / "chat.jsonl"
    jsonl.write_text(
        "".join(json.dumps({"role": "user", "content": f"imported {i}"}) + "\n" for i in range(50))
    )
    engines = [["engine", str(db), f"s{i}", "30"] for i in range(4)]
    imports = [["cli", "lcm", "import", "--db", str(db), "--session", f"imp{i}", str(jsonl)]
               for i in range(2)]  # fmt: skip
    reader = [["cli", "lcm", "stats", "--db", str(db), "--json"]]
    backup = [["backup", str(db), str(tmp_path), "3"]]
    results = start_together(tmp_path, engines + imports + reader + backup)
    chatting.join(240)
    assert answers and answers[0], "the gateway never answered"

    assert all(r["errors"] == [] and r["stored"] == 30 for r in results[:4]), results[:4]
    assert all(r["code"] == 0 for r in results[4:6]), results[4:6]
    stats = results[6]  # the reader may come before the schema: a clean refusal is fine
    assert stats["code"] == 0 or (
        stats["code"] == 1
        and ("no such file" in stats["stderr"] or "no LCM schema" in stats["stderr"])
    ), stats
    assert "Traceback" not in stats["stderr"]
    backups = results[7]
    assert backups["errors"] == [] and backups["checks"] == ["ok"] * 3, backups
    assert backups["counts"] == sorted(backups["counts"])

    rows_when(  # the gateway's turn hook commits its queue shortly after the reply
        db, "SELECT 1 FROM messages WHERE content = ?", lambda rows: bool(rows), (turn,)
    )
    store = LcmStore(db, readonly=True)
    counts = dict(fetch_all(store.conn, "SELECT session_id, count(*) FROM messages GROUP BY 1"))
    workers = {**{f"s{i}": 30 for i in range(4)}, "imp0": 50, "imp1": 50}
    assert {k: v for k, v in counts.items() if k in workers} == workers
    stored_turn = fetch_all(
        store.conn, "SELECT session_id FROM messages WHERE content = ?", (turn,)
    )
    assert len(stored_turn) == 1 and stored_turn[0][0] not in workers  # the gateway's session
    assert schema_version(store.conn) == len(MIGRATIONS)
    store.close()
    assert integrity(db) == "ok"
    assert gateway.healthy()


def schema_2_database(db: Path) -> None:
    """A database as the release before schema 3 left it, with an empty session."""
    conn = apsw.Connection(str(db))
    conn.execute("PRAGMA journal_mode = WAL")
    for version, sql in enumerate(MIGRATIONS[:2], start=1):
        conn.execute(sql)
        conn.execute(f"PRAGMA user_version = {version}")
    conn.execute(
        "INSERT INTO sessions(id, created_at) VALUES ('old', 1.0), ('empty', 1.0);"
        "INSERT INTO host_sessions VALUES ('old', 'old', 1.0), ('rotated', 'old', 1.0);"
    )
    conn.close()


def test_migration_while_another_process_reads_and_writes(tmp_path: Path) -> None:
    db = tmp_path / "lcm.db"
    schema_2_database(db)
    results = start_together(
        tmp_path,
        [
            ["old-writer", str(db), "old", "200"],
            ["engine", str(db), "new", "40"],
            ["backup", str(db), str(tmp_path), "3"],
        ],
    )
    old_writer, engine, backups = results
    assert old_writer["errors"] == [] and old_writer["stored"] == 200, old_writer
    assert engine["errors"] == [] and engine["stored"] == 40, engine
    assert backups["errors"] == [] and set(backups["checks"]) == {"ok"}, backups

    store = LcmStore(db, readonly=True)
    assert schema_version(store.conn) == len(MIGRATIONS)
    counts = dict(fetch_all(store.conn, "SELECT session_id, count(*) FROM messages GROUP BY 1"))
    assert counts == {"old": 200, "new": 40}
    assert sorted(sessions.session_ids(store)) == ["new", "old"]  # the empty session was dropped
    assert fetch_all(store.conn, "PRAGMA foreign_key_check") == []
    assert sessions.host_session(store, "rotated") == "old"
    store.close()
    assert integrity(db) == "ok"


def test_vectors_on_with_concurrent_writers(tmp_path: Path) -> None:
    db = tmp_path / "lcm.db"
    LcmStore(db).close()
    roles = [["engine", str(db), f"v{i}", "40", "static"] for i in range(3)]
    roles.append(["cli", "lcm", "search", "--db", str(db), "--json", "--mode", "fts", "topic3"])
    results = start_together(tmp_path, roles)
    for result in results[:3]:
        assert result["errors"] == [] and result["stored"] == 40, result
    assert results[3]["code"] == 0, results[3]

    engine = LcmEngine(LcmConfig.for_home(tmp_path, {"embeddings": "static"}))
    embed_all(engine.store, offline_embedder("static"))
    counts = engine.store.counts()
    assert counts["messages"] == 120 and counts["embed_queue"] == 0
    assert counts["embeddings"] == 120 + counts["summaries"]
    engine.close()
    assert integrity(db) == "ok"


def test_nothing_opens_the_database_file_a_second_time(tmp_path: Path) -> None:
    """An ``open()`` and ``close()`` of the file beside SQLite drops SQLite's POSIX locks."""
    db = tmp_path / "lcm.db"
    (result,) = start_together(tmp_path, [["audit", str(db)]])
    assert result["opened"] == []
    assert integrity(db) == "ok"
