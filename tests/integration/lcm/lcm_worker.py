"""One real process working on an LCM database, for the multi-process tests.

Run: ``python lcm_worker.py GO_FILE ROLE ARGS...``. Every worker imports
what it needs, writes ``GO_FILE.<pid>.ready`` and waits for GO_FILE to
appear, so a whole group starts at the same instant, then plays
its role and prints one JSON line (errors included, never a traceback):

- ``engine DB SESSION COUNT [EMBEDDINGS]``: the agent's engine, one message a
  transaction, a compaction every 10; with EMBEDDINGS (``static``) its
  background worker embeds meanwhile.
- ``cli ARGS...``: the operator CLI, in this process.
- ``backup DB OUT_DIR COUNT``: COUNT online backups (``Connection.backup``,
  one step) once the schema exists, each checked with ``quick_check``.
- ``old-writer DB SESSION COUNT``: a schema-2 release's writes and reads, raw
  SQL in ``BEGIN IMMEDIATE`` transactions (another process migrates meanwhile).
- ``audit DB``: the engine, doctor, stats, search and an orphan sweep with an
  audit hook recording every Python-level ``open`` of the database files.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import apsw
from backup_reader import take_backup  # beside this script (its folder is on sys.path)

from hermes_runtime.cli import main as cli_main
from hermes_runtime.lcm.config import LcmConfig
from hermes_runtime.lcm.engine.lcmengine import LcmEngine


def wait_for(go: Path) -> None:
    Path(f"{go}.{os.getpid()}.ready").touch()
    deadline = time.monotonic() + 120
    while not go.exists():
        if time.monotonic() > deadline:
            raise SystemExit("no go file")
        time.sleep(0.002)


def engine_role(db: Path, session: str, count: int, embeddings: str = "off") -> dict[str, Any]:
    config = LcmConfig.for_home(db.parent, {"embeddings": embeddings})
    engine = LcmEngine(config, start_worker=embeddings != "off")
    if embeddings != "off":
        engine.start_background()
    try:
        for index in range(count):
            text = f"{session} message {index} about topic{index % 7} " + "words " * 30
            engine.ingest(session, [{"role": ("user", "assistant")[index % 2], "content": text}])
            if index % 10 == 9:
                engine.compactions.compact(session, 800)
        worker_errors = list(engine.worker.errors) if engine.worker else []
    finally:
        engine.close()
    return {"stored": count, "errors": worker_errors}


def cli_role(argv: list[str]) -> dict[str, Any]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = cli_main(argv)
        except SystemExit as exc:
            code = int(exc.code or 0)
    return {"code": code, "stdout": out.getvalue()[-2000:], "stderr": err.getvalue()[-2000:]}


def backup_role(db: Path, out_dir: Path, count: int) -> dict[str, Any]:
    report: dict[str, Any] = {"checks": [], "counts": [], "errors": []}
    deadline = time.monotonic() + 120
    while len(report["checks"]) < count and time.monotonic() < deadline:
        try:
            source = apsw.Connection(str(db), flags=apsw.SQLITE_OPEN_READONLY)
        except apsw.CantOpenError:
            time.sleep(0.01)  # the file does not exist yet
            continue
        try:
            source.set_busy_timeout(30_000)
            tables = {r[0] for r in source.execute("SELECT name FROM sqlite_schema")}
            if "messages" not in tables:
                continue
            check, messages = take_backup(source, out_dir / f"backup-{len(report['checks'])}.db")
            report["checks"].append(check)
            report["counts"].append(messages)
        except apsw.Error as exc:
            report["errors"].append(f"{type(exc).__name__}: {exc}")
        finally:
            source.close()
        time.sleep(0.02)
    return report


def old_writer_role(db: Path, session: str, count: int) -> dict[str, Any]:
    conn = apsw.Connection(str(db))
    conn.set_busy_timeout(30_000)
    conn.execute("PRAGMA foreign_keys = ON")
    errors: list[str] = []
    for index in range(count):
        try:
            conn.execute("BEGIN IMMEDIATE")
            conn.execute(  # as that release's ingest: the session row comes with the message
                "INSERT OR IGNORE INTO sessions(id, created_at) VALUES (?, ?)", (session, 1.0)
            )
            seq = conn.execute(
                "SELECT coalesce(max(seq), 0) + 1 FROM messages WHERE session_id = ?", (session,)
            ).fetchall()[0][0]
            conn.execute(
                "INSERT INTO messages(session_id, seq, role, content, token_count, created_at) "
                "VALUES (?, ?, 'user', ?, 5, ?)",
                (session, seq, f"old release message {index}", time.time()),
            )
            conn.execute("COMMIT")
            conn.execute("SELECT count(*) FROM host_sessions").fetchall()
        except apsw.Error as exc:
            errors.append(f"{type(exc).__name__}: {exc}")
            with contextlib.suppress(apsw.Error):
                conn.execute("ROLLBACK")
    conn.close()
    return {"stored": count - len(errors), "errors": errors}


def audit_role(db: Path) -> dict[str, Any]:
    from hermes_runtime.lcm.ops.doctor import doctor, remove_orphan_outputs, stats
    from hermes_runtime.lcm.ops.operations import open_readonly, search_history

    watched = {str(db), f"{db}-wal", f"{db}-shm", f"{db}-journal"}
    opened: list[str] = []

    def hook(event: str, args: tuple[Any, ...]) -> None:
        # An exclusive create (groupaccess.create_shared, before SQLite opens a new database
        # group-writable) makes a file no connection has open yet, or fails with no
        # descriptor: neither can close one of SQLite's and drop its locks.
        exclusive = len(args) > 2 and isinstance(args[2], int) and args[2] & os.O_EXCL
        if event == "open" and args and str(args[0]) in watched and not exclusive:
            opened.append(f"{args[0]} ({args[1]})")

    sys.addaudithook(hook)
    engine = LcmEngine(LcmConfig.for_home(db.parent, {"embeddings": "static"}), start_worker=True)
    engine.start_background()
    for index in range(60):
        engine.ingest("audit", [{"role": "user", "content": f"audit {index} " + "x " * 3000}])
    engine.compactions.compact("audit", 500)
    doctor(engine.store, full=True)
    stats(engine.store)
    remove_orphan_outputs(engine.store, 0.0)
    engine.close()
    store = open_readonly(db)
    search_history(store, "audit 7", mode="hybrid", config=engine.config)
    doctor(store, full=True)
    store.close()
    return {"opened": opened}


def main() -> int:
    go, role, args = Path(sys.argv[1]), sys.argv[2], sys.argv[3:]
    wait_for(go)
    if role == "engine":
        result = engine_role(Path(args[0]), args[1], int(args[2]), *args[3:])
    elif role == "cli":
        result = cli_role(args)
    elif role == "backup":
        result = backup_role(Path(args[0]), Path(args[1]), int(args[2]))
    elif role == "old-writer":
        result = old_writer_role(Path(args[0]), args[1], int(args[2]))
    elif role == "audit":
        result = audit_role(Path(args[0]))
    else:
        raise SystemExit(f"unknown role {role}")
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
