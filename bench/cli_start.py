"""Benchmark: wall time of a `hermes-runtime` start, from exec to exit (issue 12).

Usage:
    .venv/bin/python bench/cli_start.py [--runs 20]

Each command runs as a fresh process through the console script beside this
interpreter (what a CronJob, an init container, a test's subprocess pays):
* `--version`: the floor of the CLI itself;
* `backup list --help`: one group's full parser;
* `backup create` without `--target`: a usage error (exit 2);
* `python -c pass`: the interpreter alone, for comparison.
Prints one JSON document: per command the median, min and max of RUNS runs in
milliseconds, the exit status (the same in every run, else the bench fails) and
the number of modules the command imported (`-X importtime`, one extra run),
with the 1-minute load average before and after.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import runinfo

SCRIPT = Path(sys.executable).parent / "hermes-runtime"
COMMANDS = {
    "--version": [str(SCRIPT), "--version"],
    "backup list --help": [str(SCRIPT), "backup", "list", "--help"],
    "backup create (no --target)": [str(SCRIPT), "backup", "create"],
    "python -c pass": [sys.executable, "-c", "pass"],
}


def run_once(argv: list[str], env: dict[str, str]) -> tuple[float, int]:
    start = time.perf_counter()
    done = subprocess.run(argv, env=env, capture_output=True, check=False)
    return time.perf_counter() - start, done.returncode


def imported_modules(argv: list[str], env: dict[str, str]) -> int:
    """How many modules the command imports (Python's own ``-X importtime`` report)."""
    traced = [sys.executable, "-X", "importtime", *argv[1:]]
    if argv[0] == str(SCRIPT):  # the console script is a Python file
        traced.insert(3, argv[0])
    done = subprocess.run(traced, env=env, capture_output=True, text=True, check=False)
    lines = done.stderr.splitlines()
    return sum(1 for line in lines if line.startswith("import time:")) - 1  # minus the header


def measure(argv: list[str], runs: int, env: dict[str, str]) -> dict[str, object]:
    times, codes = [], set()
    run_once(argv, env)  # warm the page cache and the .pyc files
    for _ in range(runs):
        seconds, code = run_once(argv, env)
        times.append(seconds * 1000)
        codes.add(code)
    if len(codes) != 1:
        raise SystemExit(f"{' '.join(argv)}: exit status varied between runs: {sorted(codes)}")
    return {
        "median_ms": round(statistics.median(times), 1),
        "min_ms": round(min(times), 1),
        "max_ms": round(max(times), 1),
        "exit": codes.pop(),
        "modules": imported_modules(argv, env),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20, help="runs per command (default 20)")
    args = parser.parse_args()
    if args.runs < 1:
        parser.error("--runs must be 1 or more")
    if not SCRIPT.is_file():
        parser.error(f"{SCRIPT}: no console script (run `make venv` first)")
    runinfo.announce()
    env = dict(os.environ)
    load_before = os.getloadavg()[0]
    results = {name: measure(argv, args.runs, env) for name, argv in COMMANDS.items()}
    report = {
        "runs": args.runs,
        "load_1min": [round(load_before, 2), round(os.getloadavg()[0], 2)],
        "commands": results,
    }
    json.dump(report, sys.stdout, indent=2)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
