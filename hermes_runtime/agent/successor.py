"""``successor.lock``: how a pod waiting for the data dir lock says it is ready to take over.

Both sides of one file on the data volume (``.hermes-runtime/successor.lock``):

- the successor (``Announcement``): a pod waiting for the data dir lock (``datalock.py``)
  holds an exclusive ``flock`` on this file once it is ready to take over (its gateway
  imported, ``zygote.py``), and writes where it can be reached (``Successor``); it lets go
  once the data dir lock is its own.
- the pod being replaced (``waiting_successor``, read by ``handover.py`` while its preStop
  hook waits): a held lock means a warm successor waits; the record says where to forward
  new clients.

Why a lock and not just the file: a successor that dies (a deleted pod, a node gone) drops
its ``flock`` with its process, so a stale record is never taken for a waiting pod. Before
the data dir lock, the only writes to the volume are these two lock files. Two pods waiting
at once (a delete during a rollout): the first to be ready holds it, the other simply waits
for the data dir lock.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from hermes_runtime.common.flock import try_flock
from hermes_runtime.common.logs import log_event

SUCCESSOR_LOCK_NAME = "successor.lock"


@dataclass(frozen=True)
class Successor:
    """A pod waiting for the lock, ready to take over; where its API and metrics ports are
    (``host`` empty: it did not say, so nobody forwards clients to it)."""

    host: str = ""
    api_port: int = 0
    metrics_port: int = 0

    @property
    def reachable(self) -> bool:
        return bool(self.host and self.api_port)


def waiting_successor(state_dir: Path) -> Successor | None:
    """The process waiting for the data dir lock and ready to take over at once, if any."""
    try:
        fd = os.open(state_dir / SUCCESSOR_LOCK_NAME, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None  # never announced (no file yet)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return _read_successor(fd)
        return None
    finally:
        os.close(fd)  # also drops the shared lock, if we got it


def _read_successor(fd: int) -> Successor:
    with contextlib.suppress(OSError, ValueError, TypeError, KeyError):
        info = json.loads(os.pread(fd, 4096, 0) or b"{}")
        return Successor(str(info["host"]), int(info["api_port"]), int(info["metrics_port"]))
    return Successor()


class Announcement:
    """The successor's side: holds ``successor.lock`` from the moment ``ready()`` until
    ``close()`` (the data dir lock is ours), with ``me`` written into it."""

    def __init__(self, state_dir: Path, ready: Callable[[], bool], me: Successor) -> None:
        self._path = state_dir / SUCCESSOR_LOCK_NAME
        self._ready = ready
        self._me = me
        self._fd: int | None = None

    def __enter__(self) -> Announcement:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def announce(self) -> None:
        """Take the successor lock once ready (non-blocking: the data dir lock's wait calls
        this between its polls)."""
        if self._fd is not None or not self._ready():
            return
        try:
            fd = os.open(self._path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o640)
        except OSError:
            return  # best effort: without it the old pod just waits its preStop bound
        if not try_flock(fd):
            os.close(fd)
            return
        self._fd = fd
        record = json.dumps(dataclasses.asdict(self._me)).encode() + b"\n"
        with contextlib.suppress(OSError):  # without it, the old pod just does not forward
            os.ftruncate(fd, 0)
            os.pwrite(fd, record, 0)
        log_event("agent.lock.successor", lock=str(self._path), **dataclasses.asdict(self._me))
