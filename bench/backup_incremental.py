"""Benchmark: a second backup of an unchanged outputs folder uploads nothing again.

Builds ``--size-mb`` (default 1024) of incompressible files under
.cache/bench/<tmp>/data/outputs, runs ``backup create`` twice to a file://
target (or ``--target`` URL, e.g. an S3 bucket), and prints for each run the
wall time, bytes read and bytes uploaded. A third run after touching one
file shows the cost of a small change.

Run: .venv/bin/python bench/backup_incremental.py [--size-mb 1024] [--file-mb 8]
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import runinfo

from hermes_runtime.backup import BackupSummary, create_backup, open_repository

ROOT = Path(__file__).resolve().parent.parent


def build_outputs(outputs: Path, size_mb: int, file_mb: int) -> int:
    outputs.mkdir(parents=True)
    count = max(1, size_mb // file_mb)
    for i in range(count):
        (outputs / f"artifact-{i:05d}.bin").write_bytes(os.urandom(file_mb * 1024 * 1024))
    return count


def show(label: str, summary: BackupSummary) -> None:
    print(
        f"| {label} | {summary.duration_seconds:.2f} s | {summary.bytes_read / 1e6:.1f} MB | "
        f"{summary.bytes_uploaded / 1e6:.3f} MB | {summary.files_uploaded} | "
        f"{summary.files_unchanged} |",
        flush=True,
    )


def main() -> int:
    # restic encrypts every repository; a bench repository is thrown away after the run.
    os.environ.setdefault("RESTIC_PASSWORD", "hermes-bench")
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mb", type=int, default=1024)
    parser.add_argument("--file-mb", type=int, default=8)
    parser.add_argument("--target", help="target URL (default: a fresh file:// folder)")
    parser.add_argument("--dir", type=Path, default=ROOT / ".cache" / "bench")
    args = parser.parse_args()
    runinfo.announce()
    args.dir.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="backup-incr-", dir=args.dir))
    try:
        data = work / "data"
        started = time.monotonic()
        count = build_outputs(data / "outputs", args.size_mb, args.file_mb)
        built = time.monotonic() - started
        print(f"outputs: {count} files, {args.size_mb} MB, built in {built:.1f} s")
        if args.target:
            target = open_repository(args.target)
        else:
            (work / "target").mkdir()
            target = open_repository(f"file://{work / 'target'}")
        print("| run | wall time | read | uploaded | files uploaded | files unchanged |")
        print("|---|---|---|---|---|---|")
        show("first backup", create_backup(data, target, work_dir=work))
        show("second backup, nothing changed", create_backup(data, target, work_dir=work))
        (data / "outputs" / "artifact-00000.bin").write_bytes(os.urandom(args.file_mb << 20))
        show("third backup, one file rewritten", create_backup(data, target, work_dir=work))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
