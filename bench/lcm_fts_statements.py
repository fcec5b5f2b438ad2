"""FTS5 and statements: what a message's full-text postings cost, by how they are inserted.

Run: ``.venv/bin/python bench/lcm_fts_statements.py [--messages 20000] [--batches 10,57,200,1000]``
Prints one JSON object per batch size (one line each): microseconds a message
to insert ``--messages`` chat messages into an LCM database of schema 3 (its
tables, indexes and the FTS5 trigger, the last schema that kept the postings
inside lcm.db; schema 4 moved them to ``lcm-fts.db``, written off the turn's
path: ``hermes_runtime/lcm/store/fulltext.py``), in write transactions of ``batch``
messages, three ways:

- ``per_row_us``: a statement a message (``executemany``), as the store did
  before it stored a batch with one statement;
- ``one_statement_us``: one multi-row ``INSERT ... VALUES (...), (...)`` a
  batch, as the store does now (``batchrows.INSERT_MESSAGES``);
- ``json_each_us``: one ``INSERT ... SELECT ... FROM json_each(?)`` a batch
  (the rows as one JSON text; tried, slower than VALUES at every size);
- ``no_fts_us``: one VALUES statement without the FTS5 trigger: the floor,
  what the rows cost without postings (the store's own transactions now).

Why it matters: FTS5 writes its pending postings out at every statement of a
transaction, so a statement a row paid that a message; and the fewer distinct
flushes, the cheaper each posting. The engine loop commits a batch at each
``compress()`` (57 messages in ``bench/lcm_engine_loop.py``).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import apsw
import runinfo
from lcm_engine_loop import Talk, int_list

from hermes_runtime.common.sqlite import connect
from hermes_runtime.lcm.store.batchrows import INSERT_MESSAGES
from hermes_runtime.lcm.store.schema import MIGRATIONS

SESSION = "bench"
SCHEMA_WITH_POSTINGS = 3  # the last schema that kept the FTS5 tables inside lcm.db
Row = tuple[int, str, int, str, str, None, None, None, None, None, None, int, float]


def message_rows(total: int, talk: Talk, first_id: int) -> list[Row]:
    """Rows as the store inserts them (ids and seqs after the session's first message)."""
    rows: list[Row] = []
    for index in range(total):
        text = talk.text()
        rows.append(
            (
                first_id + index,
                SESSION,
                first_id + index,
                "user" if index % 2 == 0 else "assistant",
                text,
                None,
                None,
                None,
                None,
                None,
                None,
                4 + len(text) // 4,
                time.time(),
            )
        )
    return rows


def per_row(conn: apsw.Connection, rows: list[Row]) -> None:
    conn.executemany(INSERT_MESSAGES + "(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", rows)


def one_statement(conn: apsw.Connection, rows: list[Row]) -> None:
    values = ", ".join(["(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"] * len(rows))
    conn.execute(INSERT_MESSAGES + values, [value for row in rows for value in row])


def json_each(conn: apsw.Connection, rows: list[Row]) -> None:
    columns = ", ".join(f"value->>{index}" for index in range(13))
    conn.execute(
        INSERT_MESSAGES.replace(" VALUES ", f" SELECT {columns} FROM json_each(?)"),
        (json.dumps(rows, ensure_ascii=False),),
    )


def timed_inserts(
    workdir: Path,
    rows: list[Row],
    batch: int,
    insert: Callable[[apsw.Connection, list[Row]], None],
    fts: bool,
) -> float:
    """Microseconds a message into a fresh schema-3 database, in transactions of ``batch``."""
    conn = connect(workdir / "lcm.db")
    for step in MIGRATIONS[:SCHEMA_WITH_POSTINGS]:
        conn.execute(step)
    conn.execute(f"PRAGMA user_version = {SCHEMA_WITH_POSTINGS}")
    conn.execute("INSERT INTO sessions(id, created_at) VALUES (?, ?)", (SESSION, time.time()))
    start = (1, SESSION, 1, "system", "start", None, None, None, None, None, None, 5, time.time())
    per_row(conn, [start])  # the session's first message; the rows follow from id 2
    if not fts:
        conn.execute("DROP TRIGGER messages_ai")
    started = time.perf_counter()
    for start in range(0, len(rows), batch):
        with conn:  # a write transaction, committed
            insert(conn, rows[start : start + batch])
    elapsed = time.perf_counter() - started
    conn.close()
    return round(elapsed * 1e6 / len(rows), 1)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--messages", type=int, default=20_000)
    parser.add_argument("--batches", type=int_list, default="10,57,200,1000")
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    runinfo.announce()
    batches = args.batches
    if args.messages <= 0 or any(size <= 0 for size in batches):
        parser.error("--messages and every --batches size must be positive")
    rows = message_rows(args.messages, Talk(args.seed), first_id=2)
    ways = {
        "per_row_us": (per_row, True),
        "one_statement_us": (one_statement, True),
        "json_each_us": (json_each, True),
        "no_fts_us": (one_statement, False),
    }
    for batch in batches:
        figures: dict[str, object] = {"messages": args.messages, "batch": batch}
        for name, (insert, fts) in ways.items():
            with tempfile.TemporaryDirectory(prefix="lcm-fts-") as workdir:
                figures[name] = timed_inserts(Path(workdir), rows, batch, insert, fts)
        print(json.dumps(figures), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
