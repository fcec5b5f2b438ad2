"""Waiting for an exclusive ``flock`` without blocking in the kernel.

Why poll rather than a blocking ``flock``: a process waiting for a volume's lock (the agent's
data dir lock, the backup replicator's) must keep doing things while it waits: log who holds
the lock, announce itself as a successor, give up on a timeout or a SIGTERM. A blocking
``flock`` call can do none of that, so every waiter polls a non-blocking one here and says
between polls, through ``still_waiting``, what to do and whether to go on.
"""

from __future__ import annotations

import fcntl
import time
from collections.abc import Callable


def try_flock(fd: int) -> bool:
    """Take the exclusive lock on ``fd`` if it is free; False while another file holds it."""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


def wait_for_flock(
    fd: int, still_waiting: Callable[[float], bool], poll_interval: float
) -> float | None:
    """Poll the exclusive lock on ``fd`` until taken; return the seconds waited.

    Between two polls ``still_waiting(seconds waited so far)`` runs: it logs, announces,
    raises on a timeout, or returns False to give up, and then None is returned (the lock is
    not taken).
    """
    started = time.monotonic()
    while not try_flock(fd):
        if not still_waiting(time.monotonic() - started):
            return None
        time.sleep(poll_interval)
    return time.monotonic() - started
