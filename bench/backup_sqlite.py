"""Benchmark: online snapshot of a large live SQLite database.

Builds a WAL database of ``--size-mb`` (default 500) under .cache/bench,
starts a separate writer process committing every ``--interval`` seconds
(default 10 ms) and recording each commit's latency, then measures in turn:
``cp`` of the file (the physical floor), the one-step online backup API,
``VACUUM INTO``, a full ``backup create`` (snapshot + integrity_check +
zstd + upload to a file:// target), and the ``sqlite3`` CLI's ``.backup``
(the seed's recipe) with a time limit; also ``backup create`` with
client-side encryption. For each: wall time, MB/s, and the
writer's commit latency p50/p99 during it, beside a quiet baseline.

Run: .venv/bin/python bench/backup_sqlite.py [--size-mb 500] [--sqlite3-timeout 60]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from hermes_runtime.backup import create_backup, open_target
from hermes_runtime.backup.dbsnap import snapshot_database
from hermes_runtime.common.sqlite import connect

ROOT = Path(__file__).resolve().parent.parent
WRITER = """
import sys, time
from hermes_runtime.common.sqlite import connect
conn = connect(sys.argv[1])
interval = float(sys.argv[2])
out = open(sys.argv[3], "w", buffering=1)
while True:
    started = time.monotonic()
    with conn:
        conn.execute("INSERT INTO events(body) VALUES (randomblob(300))")
        conn.execute("UPDATE counter SET n = n + 1")
    done = time.monotonic()
    out.write(f"{started:.6f} {(done - started) * 1000:.3f}\\n")
    time.sleep(interval)
"""


@dataclass
class Phase:
    name: str
    seconds: float | None
    size: int
    started: float
    ended: float
    note: str = ""


def build_database(path: Path, size_mb: int) -> None:
    conn = connect(path)
    conn.execute("CREATE TABLE IF NOT EXISTS blobs(id INTEGER PRIMARY KEY, payload BLOB)")
    conn.execute("CREATE TABLE IF NOT EXISTS events(id INTEGER PRIMARY KEY, body BLOB)")
    conn.execute("CREATE TABLE IF NOT EXISTS counter(n INTEGER)")
    conn.execute("INSERT INTO counter SELECT 0 WHERE NOT EXISTS (SELECT 1 FROM counter)")
    rows = size_mb * 1024 * 1024 // 4096
    with conn:
        conn.execute(
            "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < ?) "
            "INSERT INTO blobs(payload) SELECT randomblob(4000) FROM c",
            (rows,),
        )
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()


def latencies(log: Path, start: float, end: float) -> list[float]:
    values = []
    for line in log.read_text().splitlines():
        parts = line.split()
        if len(parts) == 2 and start <= float(parts[0]) <= end:
            values.append(float(parts[1]))
    return values


def pct(values: list[float], q: int) -> float:
    if len(values) < 2:
        return float("nan")
    return statistics.quantiles(values, n=100, method="inclusive")[q - 1]


def timed(name: str, size: int, action: Callable[[], str]) -> Phase:
    started = time.monotonic()
    note = action()
    ended = time.monotonic()
    seconds = None if note.startswith("did not finish") else ended - started
    return Phase(name, seconds, size, started, ended, note)


def run_sqlite3_backup(db: Path, dest: Path, timeout: float) -> str:
    try:
        subprocess.run(["sqlite3", str(db), f".backup '{dest}'"], check=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return f"did not finish in {timeout:.0f} s"
    return ""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mb", type=int, default=500)
    parser.add_argument("--interval", type=float, default=0.01)
    parser.add_argument("--baseline-seconds", type=float, default=10)
    parser.add_argument("--sqlite3-timeout", type=float, default=60)
    parser.add_argument("--dir", type=Path, default=ROOT / ".cache" / "bench")
    args = parser.parse_args()
    args.dir.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="backup-bench-", dir=args.dir))
    db = work / "data" / "lcm.db"
    db.parent.mkdir()
    writer = None
    try:
        t0 = time.monotonic()
        build_database(db, args.size_mb)
        size = db.stat().st_size
        print(f"database: {size / 1e6:.0f} MB built in {time.monotonic() - t0:.1f} s", flush=True)
        log = work / "latency.log"
        writer = subprocess.Popen(
            [sys.executable, "-c", WRITER, str(db), str(args.interval), str(log)]
        )
        time.sleep(2)
        phases = [Phase("no backup (baseline)", None, 0, time.monotonic(), 0.0)]
        time.sleep(args.baseline_seconds)
        phases[0].ended = time.monotonic()

        def settle() -> None:
            for leftover in work.glob("copy*"):
                leftover.unlink()
            time.sleep(3)

        def cp() -> str:
            subprocess.run(["cp", str(db), str(work / "copy.db")], check=True)
            return "torn copy of a live db: a floor, not a backup"

        steps: list[tuple[str, Callable[[], str]]] = [
            ("cp (physical floor)", cp),
            (
                "online backup API, one step",
                lambda: (snapshot_database(db, work / "copy.db"), "")[1],
            ),
            (
                "VACUUM INTO",
                lambda: (snapshot_database(db, work / "copy.db", method="vacuum"), "")[1],
            ),
            ("hermes-runtime backup create (file://)", lambda: full_create(db.parent, work)),
            (
                "hermes-runtime backup create (file://, encrypted)",
                lambda: full_create(db.parent, work, secret="bench-" + "k" * 40),
            ),
            (
                "sqlite3 .backup (seed recipe)",
                lambda: run_sqlite3_backup(db, work / "copy.db", args.sqlite3_timeout),
            ),
        ]
        for name, action in steps:
            settle()
            phase = timed(name, size, action)
            phases.append(phase)
            shown = f"{phase.seconds:.2f} s" if phase.seconds is not None else phase.note
            print(f"  {name}: {shown}", flush=True)
        report(phases, log, phases[1].seconds)
    finally:
        if writer is not None:
            writer.kill()
            writer.wait()
        shutil.rmtree(work, ignore_errors=True)
    return 0


def full_create(data_dir: Path, work: Path, secret: str | None = None) -> str:
    (work / "target").mkdir(exist_ok=True)
    target = open_target(f"file://{work / 'target'}", encryption_secret=secret)
    summary = create_backup(data_dir, target, work_dir=work)
    shutil.rmtree(work / "target")
    return f"uploaded {summary.bytes_uploaded / 1e6:.0f} MB (zstd)"


def report(phases: list[Phase], log: Path, cp_seconds: float | None) -> None:
    header = "| method | wall time | MB/s | x cp | writer commits | p50 ms | p99 ms | note |"
    print()
    print(header)
    print("|" + "---|" * 8)
    for p in phases:
        values = latencies(log, p.started, p.ended)
        wall = f"{p.seconds:.2f} s" if p.seconds is not None else (p.note if p.size else "-")
        rate = f"{p.size / p.seconds / 1e6:.0f}" if p.seconds else "-"
        ratio = f"{p.seconds / cp_seconds:.2f}" if p.seconds and cp_seconds else "-"
        note = p.note if p.seconds is not None else ""
        print(
            f"| {p.name} | {wall} | {rate} | {ratio} | {len(values)} | "
            f"{pct(values, 50):.2f} | {pct(values, 99):.2f} | {note} |"
        )


if __name__ == "__main__":
    sys.exit(main())
