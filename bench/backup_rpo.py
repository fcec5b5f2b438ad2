"""Benchmark: continuous replication's RPO, and what it uploads per 1% appended messages.

RPO (issue 15, goal <= 2 s of commits): a writer commits every ``--interval`` (100 ms) into a
WAL database, stamping each row with its commit time; ``hermes-runtime backup replicate``
(Litestream 0.5.17) ships it to a ``file://`` target (or ``--target``). After ``--seconds``
the writer and the replicator's whole process group are SIGKILLed together (a pod killed with
its volume), the data dir is deleted, and ``restore_snapshot(..., replicas=...)`` rebuilds it.
Lost = commits made minus commits restored; seconds lost = last commit's stamp minus the
last restored one's. Repeated ``--runs`` times; the worst run is the figure.

Offsite growth (goal <= 3% of the database per 1% append): an LCM-like database of
``--size-mb`` (messages + FTS5, as bench/backup_restic_append.py builds it) is replicated
until its replica is idle, 1% new messages are appended, and the bytes of the LTX files that
hold only the append's transactions are measured once the replica is idle again (L0), and
again once Litestream's level-1 compaction (every 30 s) has copied them (L0 + L1). Levels 2
and 3 (every 5 min and 1 h) copy the same pages again, and L0 files go after 5 min, so three
level copies is what stays. The initial snapshot is copied once into each level (L1 at once,
L2 after 5 min, L3 after an hour, L9 daily): a cost of the first replication, not of appends.

Run: .venv/bin/python bench/backup_rpo.py [--runs 5] [--seconds 30] [--size-mb 1024]
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import runinfo
from backup_restic_append import add_messages, build

from hermes_runtime.backup import open_repository, replica_location, restore_snapshot
from hermes_runtime.backup.replica_order import LtxFile, parse_ltx_key
from hermes_runtime.common.sqlite import connect

ROOT = Path(__file__).resolve().parent.parent
COMPACTION_WAIT = 35.0  # Litestream's level-1 compaction runs every 30 s
SCHEMA = "CREATE TABLE IF NOT EXISTS commits(id INTEGER PRIMARY KEY, ts REAL, pad BLOB)"


def write_forever(db: Path, interval: float) -> None:
    """The writer process: one stamped commit every ``interval`` seconds until killed."""
    conn = connect(db)
    conn.execute(SCHEMA)
    while True:
        with conn:
            stamp = (time.time(), os.urandom(300))
            conn.execute("INSERT INTO commits(ts, pad) VALUES (?, ?)", stamp)
        time.sleep(interval)


def last_commit(db: Path) -> tuple[int, float]:
    conn = connect(db, readonly=True)
    try:
        count, ts = conn.execute("SELECT count(*), max(ts) FROM commits").fetchall()[0]
    finally:
        conn.close()
    return int(count), float(ts or 0.0)  # type: ignore[arg-type]


def start_replicator(data: Path, target: str, work: Path) -> subprocess.Popen[bytes]:
    log = (work / "replicate.log").open("ab")
    return subprocess.Popen(
        [
            *(sys.executable, "-m", "hermes_runtime", "backup", "replicate"),
            *("--data-dir", str(data), "--target", target),
            *("--rescan-seconds", "1", "--work-dir", str(work)),
        ],
        stdout=log,
        stderr=log,
        start_new_session=True,
    )


def rpo_run(work: Path, target: str, interval: float, seconds: float) -> tuple[int, int, float]:
    """One kill-and-restore round: (commits made, commits lost, seconds lost)."""
    data = work / "data"
    data.mkdir()
    db = data / "lcm.db"
    conn = connect(db)
    conn.execute(SCHEMA)
    conn.close()
    writer = subprocess.Popen([sys.executable, __file__, "--writer", str(db), str(interval)])
    replicator = start_replicator(data, target, work)
    try:
        time.sleep(seconds)
    finally:
        os.killpg(replicator.pid, signal.SIGKILL)
        writer.kill()
        writer.wait()
        replicator.wait()
    made, made_ts = last_commit(db)
    shutil.rmtree(data)
    repo = open_repository(target)
    restore_snapshot(repo, data, replicas=replica_location(target))
    kept, kept_ts = last_commit(db)
    shutil.rmtree(data)
    return made, made - kept, made_ts - kept_ts


def ltx_files(root: Path) -> list[tuple[LtxFile, int]]:
    """The replicas' LTX files under ``root``, named as restore reads them, with their sizes."""
    base = root / "litestream"
    found = []
    for path in base.rglob("*.ltx"):
        parsed = parse_ltx_key(path.relative_to(base).as_posix())
        if parsed is not None and path.is_file():
            found.append((parsed, path.stat().st_size))
    return found


def replica_bytes(root: Path, after_txid: int = -1, level: int | None = None) -> int:
    """Bytes of the replicas' LTX files (in ``level``), or of those holding a transaction after
    ``after_txid``.

    A compacted file may also hold a few small transactions from just before (Litestream's own
    checkpoints); the append's pages are what makes its size.
    """
    return sum(
        size
        for ltx, size in ltx_files(root)
        if ltx.max_txid > after_txid and level in (None, ltx.level)
    )


def max_txid_of(root: Path, level: int | None = None) -> int:
    """The last transaction the replicas hold, in ``level`` or in any level."""
    return max(
        (ltx.max_txid for ltx, _ in ltx_files(root) if level in (None, ltx.level)), default=0
    )


def wait_for_level(root: Path, level: int, txid: int, timeout: float = 4 * COMPACTION_WAIT) -> None:
    """Until Litestream's compaction has copied transaction ``txid`` into ``level``."""
    deadline = time.monotonic() + timeout
    while max_txid_of(root, level) < txid:
        if time.monotonic() > deadline:
            raise TimeoutError(f"level {level} of {root} did not reach txid {txid:x}")
        time.sleep(0.5)


def wait_idle(root: Path, quiet_seconds: float = 5.0, timeout: float = 600.0) -> int:
    """Bytes under the replicas once they have not changed for ``quiet_seconds``."""
    deadline = time.monotonic() + timeout
    last, since = -1, time.monotonic()
    while time.monotonic() < deadline:
        now = replica_bytes(root) if (root / "litestream").exists() else 0
        if now != last:
            last, since = now, time.monotonic()
        elif now and time.monotonic() - since >= quiet_seconds:
            return now
        time.sleep(0.5)
    raise TimeoutError(f"replicas under {root} still changing after {timeout:.0f} s")


def growth(work: Path, size_mb: int) -> None:
    """Offsite bytes per 1% append: the LTX files holding only the append's transactions.

    Litestream copies the initial snapshot once per level (L0, L1, then L2 after 5 min, L3
    after an hour, L9 daily): a fixed cost of the first replication, not growth. What an
    append adds is its L0 file and the same pages again in each level that compacts it (L0
    files go after 5 minutes, lower levels once a higher one covers them).
    """
    data, target = work / "data", work / "target"
    data.mkdir()
    target.mkdir()
    db = data / "lcm.db"
    count = build(db, size_mb, fts=True)
    size = db.stat().st_size
    replicator = start_replicator(data, f"file://{target}", work)
    try:
        wait_idle(target)
        base = max_txid_of(target)
        wait_for_level(target, 1, base)  # the first level-1 compaction: the snapshot, alone
        wait_idle(target)
        snapshot = sum(p.stat().st_size for p in target.glob("litestream/*/ltx/0/*.ltx"))
        print(
            f"database: {size / 1e6:.0f} MB, {count} messages; its initial snapshot "
            f"{snapshot / 1e6:.1f} MB (L0; copied once into L1, L2, L3 and L9)"
        )
        base = max_txid_of(target)
        add_messages(db, max(1, count // 100), True, count)
        wait_for_level(target, 0, base + 1)  # the append's first transaction is uploaded
        wait_idle(target)
        after_l0 = replica_bytes(target, base, level=0)  # level 1 may already hold it too
        wait_for_level(target, 1, max_txid_of(target))
        wait_idle(target)
        after_l1 = replica_bytes(target, base)
    finally:
        os.killpg(replicator.pid, signal.SIGKILL)
        replicator.wait()
    print("| +1% messages | bytes of the append's LTX files | % of the database |")
    print("|---|---|---|")
    for label, added in (("after the L0 upload", after_l0), ("after L1 compaction", after_l1)):
        print(f"| {label} | {added / 1e6:.2f} MB | {100 * added / size:.2f} % |")
    level = after_l1 / 2
    print(
        f"each level holding the append: {level / 1e6:.2f} MB ({100 * level / size:.2f} %); "
        f"with L1, L2 and L3 kept (L0 removed after 5 min): {300 * level / size:.2f} %"
    )


def main() -> int:
    if len(sys.argv) == 4 and sys.argv[1] == "--writer":
        write_forever(Path(sys.argv[2]), float(sys.argv[3]))
        return 0
    os.environ.setdefault("RESTIC_PASSWORD", "hermes-bench")  # restore opens the repository
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=30.0, help="replication time per run")
    parser.add_argument("--interval", type=float, default=0.1, help="seconds between commits")
    parser.add_argument("--size-mb", type=int, default=1024, help="0: skip the growth part")
    parser.add_argument("--target", help="replicate here (default: a fresh file:// folder)")
    parser.add_argument("--dir", type=Path, default=ROOT / ".cache" / "bench")
    args = parser.parse_args()
    runinfo.announce()
    args.dir.mkdir(parents=True, exist_ok=True)
    print(f"| run | commits | lost | seconds lost (commit every {args.interval:g} s) |")
    print("|---|---|---|---|")
    worst = 0.0
    for run in range(1, args.runs + 1):
        work = Path(tempfile.mkdtemp(prefix="backup-rpo-", dir=args.dir))
        try:
            (work / "target").mkdir()
            target = args.target or f"file://{work / 'target'}"
            made, lost, seconds = rpo_run(work, target, args.interval, args.seconds)
            worst = max(worst, seconds)
            print(f"| {run} | {made} | {lost} | {seconds:.2f} |", flush=True)
        finally:
            shutil.rmtree(work, ignore_errors=True)
    if args.runs:
        print(f"worst RPO: {worst:.2f} s (goal <= 2 s)")
    if args.size_mb:
        work = Path(tempfile.mkdtemp(prefix="backup-rpo-growth-", dir=args.dir))
        try:
            growth(work, args.size_mb)
        finally:
            shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
