"""Benchmark: online snapshot of a large live SQLite database.

Builds a WAL database of ``--size-mb`` (default 500) under .cache/bench,
starts a separate writer process committing every ``--interval`` seconds
(default 10 ms) and recording each commit's latency, then measures in turn:
``cp`` of the file (the physical floor), ``cp`` + fsync of the copy (the
floor for a DURABLE copy), the one-step online backup API, ``VACUUM INTO``,
a full ``backup create`` (snapshot + integrity_check + row counts, then
restic: chunking, dedup, zstd, encryption) into a file:// restic repository
on the same disk, the same to a repository on another filesystem
(``--other-target-dir``, default /dev/shm: in a pod the backup PVC or S3 is
not the data disk), and the ``sqlite3`` CLI's ``.backup`` (the seed's
recipe) with a time limit. restic comes from ``$HERMES_RUNTIME_RESTIC``, else
PATH (the pinned one: .cache/tools/bin/restic from ci/install-tools.sh).
With ``--seaweedfs``, also a full ``backup create`` to an S3 bucket on a
real SeaweedFS on loopback: the test tier's container (tests/support/seaweedfs.py; build
its image first with ``NO_PUSH=1 ci/build-images.sh seaweedfs``).

Each phase is repeated until it has run ``--phase-seconds`` (default 10 s)
so the writer's p99 comes from hundreds of commits, not the few dozen of
one run; wall time is the median run (min-max shown). The load average is
printed per phase: the VM's 2 cores are shared, so say it next to figures.

``--interleave-with DIR`` instead compares two versions of the code on a
static database: runs of ``backup create`` alternate between the code in
DIR (e.g. ``git archive <commit> hermes_runtime | tar -x -C DIR``, put
first on PYTHONPATH) and this checkout, so a load that drifts over minutes
affects both alike.

Run: .venv/bin/python bench/backup_sqlite.py [--size-mb 500] [--sqlite3-timeout 60]
     PYTHONPATH=tests .venv/bin/python bench/backup_sqlite.py --seaweedfs  (tests/support's server)
     .venv/bin/python bench/backup_sqlite.py --interleave-with /tmp/before [--pairs 5]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import runinfo

from hermes_runtime.backup import create_backup, open_repository
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
    size: int
    runs: list[float] = field(default_factory=list)  # seconds of each finished run
    windows: list[tuple[float, float]] = field(default_factory=list)
    load: float = 0.0
    note: str = ""

    @property
    def seconds(self) -> float | None:
        return statistics.median(self.runs) if self.runs else None


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


def latencies(log: Path, windows: list[tuple[float, float]]) -> list[float]:
    values = []
    for line in log.read_text().splitlines():
        parts = line.split()
        if len(parts) == 2 and any(a <= float(parts[0]) <= b for a, b in windows):
            values.append(float(parts[1]))
    return values


def pct(values: list[float], q: int) -> float:
    if len(values) < 2:
        return float("nan")
    return statistics.quantiles(values, n=100, method="inclusive")[q - 1]


def measure(
    name: str, size: int, action: Callable[[], str], cleanup: Callable[[], None], seconds: float
) -> Phase:
    """Run ``action`` again and again until ``seconds`` of runs are recorded (at least once)."""
    phase = Phase(name, size, load=os.getloadavg()[0])
    while sum(b - a for a, b in phase.windows) < seconds:
        started = time.monotonic()
        note = action()
        ended = time.monotonic()
        phase.windows.append((started, ended))
        phase.note = note
        cleanup()
        if note.startswith("did not finish"):
            break
        phase.runs.append(ended - started)
    return phase


def run_sqlite3_backup(db: Path, dest: Path, timeout: float) -> str:
    try:
        subprocess.run(["sqlite3", str(db), f".backup '{dest}'"], check=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return f"did not finish in {timeout:.0f} s"
    return ""


def copy_and_fsync(db: Path, dest: Path) -> str:
    subprocess.run(["cp", str(db), str(dest)], check=True)
    fd = os.open(dest, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    return "durable copy: the floor for a backup that survives a crash"


def full_create(data_dir: Path, target_dir: Path, work: Path) -> str:
    target_dir.mkdir(parents=True, exist_ok=True)
    return create_to(data_dir, f"file://{target_dir}", work)


def create_to(data_dir: Path, url: str, work: Path) -> str:
    target = open_repository(url)
    summary = create_backup(data_dir, target, work_dir=work)
    return f"restic added {summary.bytes_uploaded / 1e6:.0f} MB (packed)"


def main() -> int:
    # restic encrypts every repository; a bench repository is thrown away after the run.
    os.environ.setdefault("RESTIC_PASSWORD", "hermes-bench")
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mb", type=int, default=500)
    parser.add_argument("--interval", type=float, default=0.01)
    parser.add_argument("--baseline-seconds", type=float, default=10)
    parser.add_argument("--phase-seconds", type=float, default=10)
    parser.add_argument("--sqlite3-timeout", type=float, default=60)
    parser.add_argument("--dir", type=Path, default=ROOT / ".cache" / "bench")
    parser.add_argument("--other-target-dir", type=Path, default=Path("/dev/shm"))
    parser.add_argument(
        "--seaweedfs", action="store_true", help="add a phase with an S3 target on SeaweedFS"
    )
    parser.add_argument("--interleave-with", type=Path, metavar="DIR")
    parser.add_argument("--pairs", type=int, default=5)
    parser.add_argument(
        "--only", action="append", default=[], help="run only phases whose name contains this"
    )
    args = parser.parse_args()
    s3_starter = seaweedfs_starter() if args.seaweedfs else None
    runinfo.announce()
    args.dir.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="backup-bench-", dir=args.dir))
    other = Path(tempfile.mkdtemp(prefix="backup-bench-", dir=args.other_target_dir))
    db = work / "data" / "lcm.db"
    db.parent.mkdir()
    if args.interleave_with:
        try:
            interleave(args.interleave_with.resolve(), db, work, args.size_mb, args.pairs)
        finally:
            shutil.rmtree(work, ignore_errors=True)
            shutil.rmtree(other, ignore_errors=True)
        return 0
    with contextlib.ExitStack() as stack:
        s3_url = start_seaweedfs(stack, s3_starter) if s3_starter else None
        run_phases(args, work, other, db, s3_url)
    return 0


ONE_CREATE = """
import os, sys, time
from pathlib import Path
import hermes_runtime
from hermes_runtime.backup import create_backup, open_repository
data, target = Path(sys.argv[1]), Path(sys.argv[2])
target.mkdir()
started = time.monotonic()
with open(os.devnull, "w") as quiet:
    create_backup(data, open_repository(f"file://{target}"), work_dir=target.parent, stream=quiet)
print(f"{time.monotonic() - started:.3f} {os.getloadavg()[0]:.2f} {hermes_runtime.__file__}")
"""


def interleave(old_code: Path, db: Path, work: Path, size_mb: int, pairs: int) -> None:
    """Alternate ``create`` runs of the code in ``old_code`` and of this checkout."""
    build_database(db, size_mb)
    times: dict[str, list[float]] = {"before": [], "after": []}
    for pair in range(pairs):
        for label, pythonpath in (("before", str(old_code)), ("after", "")):
            target = work / f"target-{label}-{pair}"
            env = {**os.environ, "PYTHONPATH": pythonpath}
            done = subprocess.run(
                [sys.executable, "-c", ONE_CREATE, str(db.parent), str(target)],
                env=env,
                cwd=work,
                capture_output=True,
                text=True,
                check=True,
            )
            seconds, load, module = done.stdout.split()
            times[label].append(float(seconds))
            print(f"pair {pair + 1} {label}: {float(seconds):.2f} s, load {load} ({module})")
            shutil.rmtree(target)
    for label, values in times.items():
        shown = " / ".join(f"{v:.2f}" for v in values)
        print(f"{label}: {shown}; median {statistics.median(values):.2f} s")


def seaweedfs_starter() -> Callable[[], contextlib.AbstractContextManager[Any]]:
    """The integration tier's SeaweedFS starter (tests/support), found before any work."""
    try:
        from support.seaweedfs import seaweedfs_server
    except ModuleNotFoundError as exc:
        raise runinfo.missing_test_helpers(exc) from exc
    return seaweedfs_server


def start_seaweedfs(
    stack: contextlib.ExitStack, starter: Callable[[], contextlib.AbstractContextManager[Any]]
) -> str:
    """A real S3 endpoint on loopback for one bench run; the AWS_* variables point at it."""
    server = stack.enter_context(starter())
    server.create_bucket("bench")
    os.environ.update(server.env())
    return "s3://bench/agent"


def run_phases(
    args: argparse.Namespace, work: Path, other: Path, db: Path, s3_url: str | None
) -> None:
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
        baseline = Phase("no backup (baseline)", 0, load=os.getloadavg()[0])
        started = time.monotonic()
        time.sleep(args.baseline_seconds)
        baseline.windows.append((started, time.monotonic()))
        phases = [baseline]

        def cleanup() -> None:
            for leftover in work.glob("copy*"):
                leftover.unlink()
            for folder in (work / "target", other / "target"):
                shutil.rmtree(folder, ignore_errors=True)
            time.sleep(0.5)

        copy = work / "copy.db"
        steps: list[tuple[str, Callable[[], str]]] = [
            ("cp (physical floor)", lambda: (subprocess.run(["cp", str(db), str(copy)]), "")[1]),
            ("cp + fsync (durable floor)", lambda: copy_and_fsync(db, copy)),
            ("online backup API, one step", lambda: (snapshot_database(db, copy), "")[1]),
            (
                "VACUUM INTO",
                lambda: (snapshot_database(db, copy, method="vacuum"), "")[1],
            ),
            (
                "backup create (file://, same disk)",
                lambda: full_create(db.parent, work / "target", work),
            ),
            (
                f"backup create (file://, target on {args.other_target_dir})",
                lambda: full_create(db.parent, other / "target", work),
            ),
            *(
                [
                    (
                        "backup create (s3://, SeaweedFS on loopback)",
                        lambda: create_to(db.parent, s3_url, work),
                    )
                ]
                if s3_url
                else []
            ),
            (
                "sqlite3 .backup (seed recipe)",
                lambda: run_sqlite3_backup(db, copy, args.sqlite3_timeout),
            ),
        ]
        for name, action in steps:
            if args.only and not any(word in name for word in args.only):
                continue
            time.sleep(2)
            phase = measure(name, size, action, cleanup, args.phase_seconds)
            phases.append(phase)
            shown = f"{phase.seconds:.2f} s" if phase.seconds is not None else phase.note
            print(f"  {name}: {shown} ({len(phase.runs)} runs, load {phase.load:.2f})", flush=True)
        report(phases, log)
    finally:
        if writer is not None:
            writer.kill()
            writer.wait()
        shutil.rmtree(work, ignore_errors=True)
        shutil.rmtree(other, ignore_errors=True)


def report(phases: list[Phase], log: Path) -> None:
    floors = {p.name: p.seconds for p in phases if p.name.startswith("cp")}
    cp = floors.get("cp (physical floor)")
    cp_sync = floors.get("cp + fsync (durable floor)")
    print()
    print(
        "| method | wall s (median, min-max, runs) | MB/s | x cp | x cp+fsync "
        "| writer commits | p50 ms | p99 ms | load | note |"
    )
    print("|" + "---|" * 10)
    for p in phases:
        values = latencies(log, p.windows)
        median = p.seconds
        if median is None:
            wall = p.note if p.size else "-"
        else:
            wall = f"{median:.2f} ({min(p.runs):.2f}-{max(p.runs):.2f}, {len(p.runs)})"
        rate = f"{p.size / median / 1e6:.0f}" if median else "-"
        ratio = f"{median / cp:.2f}" if median and cp else "-"
        ratio_sync = f"{median / cp_sync:.2f}" if median and cp_sync else "-"
        note = p.note if median is not None else ""
        print(
            f"| {p.name} | {wall} | {rate} | {ratio} | {ratio_sync} | {len(values)} | "
            f"{pct(values, 50):.2f} | {pct(values, 99):.2f} | {p.load:.2f} | {note} |"
        )


if __name__ == "__main__":
    sys.exit(main())
