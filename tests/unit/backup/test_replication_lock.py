"""One replicator per data volume: a second one waits for the first, or gives up when stopped.

With a RollingUpdate the new pod's replicate sidecar starts while the old pod's still
runs; two Litestream processes on one replica would both write its generations.
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from pathlib import Path

from hermes_runtime.backup.continuous import replication_lock

HOLDER = """
import sys, time
from pathlib import Path
from hermes_runtime.backup.continuous import replication_lock
with replication_lock(Path(sys.argv[1]), lambda: False) as held:
    print("held" if held else "not held", flush=True)
    sys.stdin.readline()
"""


def start_holder(data_dir: Path) -> subprocess.Popen[str]:
    """Another process (the old pod's sidecar) holding the lock until its stdin closes."""
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(data_dir)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
    return holder


def test_a_second_replicator_waits_until_the_first_one_exits(tmp_path: Path) -> None:
    holder = start_holder(tmp_path)
    taken = threading.Event()

    def second() -> None:
        with replication_lock(tmp_path, lambda: False) as held:
            if held:
                taken.set()

    thread = threading.Thread(target=second)
    thread.start()
    time.sleep(0.6)
    assert not taken.is_set(), "took the lock while another replicator held it"
    assert holder.stdin is not None
    holder.stdin.close()
    holder.wait(timeout=10)
    thread.join(timeout=10)
    assert taken.is_set(), "never took the lock after the first replicator exited"


def test_a_waiting_replicator_stopped_by_sigterm_gives_up(tmp_path: Path) -> None:
    holder = start_holder(tmp_path)
    stop = threading.Event()
    outcome: list[bool] = []

    def second() -> None:
        with replication_lock(tmp_path, stop.is_set) as held:
            outcome.append(held)

    thread = threading.Thread(target=second)
    thread.start()
    time.sleep(0.3)
    stop.set()
    thread.join(timeout=10)
    assert outcome == [False]
    assert holder.stdin is not None
    holder.stdin.close()
    holder.wait(timeout=10)


def test_the_lock_lives_with_litestreams_state_which_backups_exclude(tmp_path: Path) -> None:
    with replication_lock(tmp_path, lambda: False) as held:
        assert held
    assert (tmp_path / ".hermes-runtime" / "litestream" / "replicate.lock").is_file()
