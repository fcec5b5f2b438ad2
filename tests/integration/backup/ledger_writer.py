"""A separate process that commits to a SQLite database every few milliseconds.

Each transaction inserts one ledger row AND updates a running total, so a
torn copy (one without the other) is detectable: ``totals.n`` must equal the
number of ledger rows and ``totals.amount`` their sum. Runs until killed.

CHECKPOINTS mimics a database's owner (continuous-replication tests): ``none`` (the default;
LCM: only SQLite's automatic PASSIVE checkpoint), ``hermes`` (Hermes' state.db: a PASSIVE
checkpoint every 10 commits, and a TRUNCATE one, as at close or before VACUUM, every 50).
Usage: python ledger_writer.py DB_PATH INTERVAL_SECONDS PAYLOAD_BYTES [CHECKPOINTS]
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from hermes_runtime.common.sqlite import connect

SCHEMA = """
CREATE TABLE IF NOT EXISTS ledger(id INTEGER PRIMARY KEY, amount INTEGER, payload BLOB);
CREATE TABLE IF NOT EXISTS totals(k INTEGER PRIMARY KEY CHECK (k = 1), n INTEGER, amount INTEGER);
INSERT OR IGNORE INTO totals VALUES (1, 0, 0);
"""


def prepare(path: Path, initial_rows: int, payload_bytes: int) -> None:
    """Create the database with ``initial_rows`` consistent rows (used for a large file)."""
    conn = connect(path)
    conn.execute(SCHEMA)
    with conn:
        for i in range(initial_rows):
            conn.execute(
                "INSERT INTO ledger(amount, payload) VALUES (?, ?)",
                (i % 97, os.urandom(payload_bytes)),
            )
        conn.execute(
            "UPDATE totals SET n = (SELECT count(*) FROM ledger), "
            "amount = (SELECT coalesce(sum(amount), 0) FROM ledger)"
        )
    conn.close()


def run(path: Path, interval: float, payload_bytes: int, checkpoints: str = "none") -> None:
    conn = connect(path, busy_timeout_ms=1000 if checkpoints == "hermes" else 5000)  # Hermes: 1 s
    conn.execute(SCHEMA)
    counter = 0
    while True:
        counter += 1
        amount = counter % 13 + 1
        with conn:
            conn.execute(
                "INSERT INTO ledger(amount, payload) VALUES (?, ?)",
                (amount, os.urandom(payload_bytes)),
            )
            conn.execute("UPDATE totals SET n = n + 1, amount = amount + ? WHERE k = 1", (amount,))
        if checkpoints == "hermes" and counter % 10 == 0:
            mode = "TRUNCATE" if counter % 50 == 0 else "PASSIVE"
            conn.execute(f"PRAGMA wal_checkpoint({mode})").fetchall()
        time.sleep(interval)


if __name__ == "__main__":
    run(Path(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3]), *sys.argv[4:5])
