"""What a benchmark ran at: the commit and the machine's load, printed when it starts and ends.

Every figure in docs/benchmarks.md names both: on a shared 2-core machine the load moves a
figure more than most changes do, and a figure describes only the code it measured. The lines
go to stderr, so a bench's JSON on stdout stays parseable. Imported from bench/ itself (a
script's folder is on the path of the script), never installed.
"""

from __future__ import annotations

import atexit
import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
MEASURED = ("hermes_runtime", "bench")  # uncommitted changes here change the figures
HELPER_PACKAGES = ("support", "e2e", "fakes")  # under tests/, shared with the test suites


def commit() -> str:
    """HEAD's short sha, and the files under MEASURED that differ from it, if any."""
    try:
        sha = _git("rev-parse", "--short", "HEAD").strip()
        changed = _git("status", "--porcelain", "--", *MEASURED).splitlines()
    except (OSError, subprocess.SubprocessError):
        return "unknown (not a git checkout)"
    if not changed:
        return sha
    names = [line[3:] for line in changed]
    more = f" and {len(names) - 3} more" if len(names) > 3 else ""
    return f"{sha} with uncommitted changes to {', '.join(names[:3])}{more}"


def load() -> str:
    one, five, fifteen = os.getloadavg()
    return f"{one:.2f} / {five:.2f} / {fifteen:.2f} (1 / 5 / 15 min, {os.cpu_count()} cores)"


def announce() -> None:
    """Print the commit and the load now, and the load again when the process exits."""
    name = Path(sys.argv[0]).name
    started = time.monotonic()
    _say(f"bench {name}: commit {commit()}; load {load()}")
    atexit.register(
        lambda: _say(f"bench {name}: ended after {time.monotonic() - started:.0f} s; load {load()}")
    )


def missing_test_helpers(exc: ModuleNotFoundError) -> SystemExit:
    """The error of a bench that needs the test suites' helpers and was run without them.

    Anything else missing is raised as it is.
    """
    if exc.name not in HELPER_PACKAGES:
        raise exc
    script = os.path.relpath(sys.argv[0], REPO)
    return SystemExit(
        f"{script} uses the test suites' helpers (tests/{exc.name}); run it from the "
        f"repository as: PYTHONPATH=tests .venv/bin/python {script}"
    )


def _git(*args: str) -> str:
    done = subprocess.run(
        ["git", "-C", str(REPO), *args], capture_output=True, text=True, check=True, timeout=30
    )
    return done.stdout


def _say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)
