"""Wall and CPU time of each test tier, the load average beside each (issue 12's time goals).

Usage: .venv/bin/python bench/test_tiers.py [--tiers unit,integration,chart,image]
                                            [--workers 3] [--e2e-workers 3] [-- PYTEST_ARGS...]

Runs each tier's pytest command as `make test` does (`-n TEST_WORKERS --dist worksteal`, the
e2e tier with `-n E2E_WORKERS --dist load --longest-first` and the durations cache under
`.cache/pytest` against KUBECONFIG, images already pushed to
HERMES_E2E_REGISTRY), one after the other, and prints per tier: wall seconds, CPU seconds of
the tier's processes (user + system, from getrusage of the children), the 1-minute load
average before and after, and pytest's exit status. The figures for docs/benchmarks.md come
from a quiet machine; a warm `.ci/run` on a fresh clone is timed by `time .ci/run` itself.
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

import runinfo

REPO = Path(__file__).resolve().parents[1]
PYTEST = REPO / ".venv" / "bin" / "pytest"
TIERS = ("unit", "integration", "chart", "image", "e2e")


def command(tier: str, workers: int, e2e_workers: int, extra: list[str]) -> list[str]:
    cmd = [str(PYTEST), f"tests/{tier}", "-q"]
    if tier == "e2e":  # the Makefile's E2E_PYTEST: longest scenarios first, from last run's times
        cmd += ["-n", str(e2e_workers), "--dist", "load", "--longest-first"]
        return [*cmd, "-o", f"cache_dir={REPO / '.cache' / 'pytest'}", *extra]
    cmd += ["-p", "no:cacheprovider", "-n", str(workers), "--dist", "worksteal"]
    return cmd + extra


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run_tier(cmd: list[str]) -> tuple[float, float, int]:
    cpu, start = children_cpu(), time.monotonic()
    done = subprocess.run(cmd, cwd=REPO, stdout=subprocess.DEVNULL, check=False)
    return time.monotonic() - start, children_cpu() - cpu, done.returncode


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tiers", default="unit,integration,chart,image")
    parser.add_argument("--workers", type=int, default=3, help="TEST_WORKERS (0: one by one)")
    parser.add_argument("--e2e-workers", type=int, default=3)
    parser.add_argument("pytest_args", nargs="*", help="after --: passed to every pytest")
    args = parser.parse_args()
    runinfo.announce()
    tiers = [t for t in args.tiers.split(",") if t]
    unknown = sorted(set(tiers) - set(TIERS))
    if unknown:
        parser.error(f"unknown tier(s) {unknown}: choose from {', '.join(TIERS)}")
    failed = 0
    for tier in tiers:
        before = os.getloadavg()[0]
        wall, cpu, status = run_tier(
            command(tier, args.workers, args.e2e_workers, args.pytest_args)
        )
        after = os.getloadavg()[0]
        failed += status != 0
        print(
            f"{tier:<12} {wall:7.1f} s wall  {cpu:7.1f} s CPU  "
            f"load {before:.1f} -> {after:.1f}  exit {status}",
            flush=True,
        )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
