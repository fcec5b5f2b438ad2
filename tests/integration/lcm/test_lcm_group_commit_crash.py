"""The turn hook's group commit with real processes: a SIGKILL loses no message for good.

The gateway's turn hook queues each turn and a writer thread commits the
queue in batches (``writebehind.py``), so a process killed with turns in the
queue loses them from ``lcm.db``. They are still in the host's transcript,
which Hermes hands back after a restart (it reloads the session from
``state.db``): the next sync must align with what was committed and store
exactly the lost turns, once.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

from lcm_testlib import stored_rows
from turn_hook_driver import transcript

DRIVER = Path(__file__).with_name("turn_hook_driver.py")
SESSION = "hermes-session-1"
QUEUED_MS = "10000"  # nothing commits on the clock during a test: only a flush or the exit
MESSAGES = "SELECT content FROM messages WHERE session_id = ? ORDER BY seq"


def drive(home: Path, end: str, *steps: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, str(DRIVER), str(home), SESSION, QUEUED_MS, end, *steps],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def finish(process: subprocess.Popen[str]) -> None:
    out, err = process.communicate(timeout=120)
    assert process.returncode == 0, err[-3000:]
    assert json.loads(out.strip().splitlines()[-1])["steps"]


def contents(home: Path) -> list[str]:
    return [r[0] for r in stored_rows(home / "lcm.db", MESSAGES, (SESSION,))]


def expected(turns: int) -> list[str]:
    return [m["content"] for m in transcript(turns)[1:]]


def test_turns_queued_at_a_sigkill_are_stored_by_the_next_sync_after_restart(
    tmp_path: Path,
) -> None:
    first = drive(tmp_path, "hang", "1", "flush", "2", "3", "4")
    assert first.stdout is not None
    assert json.loads(first.stdout.readline())["steps"]  # every turn hooked, 2-4 queued
    first.send_signal(signal.SIGKILL)
    first.wait(60)
    assert first.returncode == -signal.SIGKILL
    assert contents(tmp_path) == expected(1)  # the queued turns died with the process

    # The restarted gateway: Hermes hands the hook the whole transcript, plus a new turn.
    finish(drive(tmp_path, "exit", "5"))
    assert contents(tmp_path) == expected(5)  # turns 2-4 recovered, nothing stored twice


def test_a_process_that_exits_commits_its_queue(tmp_path: Path) -> None:
    finish(drive(tmp_path, "exit", "1", "2", "3"))  # no flush, no close: atexit commits
    assert contents(tmp_path) == expected(3)
    finish(drive(tmp_path, "exit", "4"))  # a later run appends after it, once
    assert contents(tmp_path) == expected(4)
