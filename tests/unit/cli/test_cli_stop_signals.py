"""A long-running verb (the Vault refresher, the plugin watcher) ends on SIGTERM or SIGINT."""

from __future__ import annotations

import subprocess
import sys

import pytest

# The verb's loop as the refresher runs it: wait on the Event in short slices, the signal
# arriving while the main thread is inside ``Event.wait`` (where a handler that took the
# Event's lock itself could hang the process).
LOOP = r"""
import os, signal, sys, threading, time
from hermes_runtime.cli._shared import stop_on_signals
stop = stop_on_signals()
threading.Timer(0.3, os.kill, (os.getpid(), getattr(signal, sys.argv[1]))).start()
deadline = time.monotonic() + 20
while not stop.wait(0.001):
    if time.monotonic() > deadline:
        sys.exit("the stop signal never ended the loop")
print("stopped")
"""


@pytest.mark.parametrize("name", ["SIGTERM", "SIGINT"])
def test_a_stop_signal_ends_the_loop_cleanly(name: str) -> None:
    done = subprocess.run(
        [sys.executable, "-c", LOOP, name], capture_output=True, text=True, timeout=60, check=False
    )
    assert (done.returncode, done.stdout.strip()) == (0, "stopped"), done.stderr
