"""At most one gateway per data volume: an exclusive ``flock`` on a file in the data dir.

Why: a Deployment with ``Recreate`` keeps one pod during a rollout (and the chart's default,
``RollingUpdate``, does not even try), but a deleted or evicted pod is replaced at once, so the
old gateway (still draining) and the new one ran together on the same SQLite files. The lock
lives on the volume itself, so it holds whatever started the second process (a replacement pod,
an operator's ``kubectl exec``, a stuck node coming back).

Why ``flock`` and not ``fcntl`` byte-range locks: a ``flock`` belongs to the open file, so the
gateway child inherits it (``pass_fds``) and the lock stays held until the supervisor *and*
the gateway are gone, even if the supervisor is killed first. Linux's NFS client maps
``flock`` onto NFS locks, so it also holds across nodes on a shared volume.

While a process waits for the lock, ``while_waiting`` runs between polls: the entrypoint
announces itself there as the successor of the pod it replaces (``successor.py``).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import socket
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from hermes_runtime.common.errors import RuntimeFailure
from hermes_runtime.common.flock import wait_for_flock
from hermes_runtime.common.logs import log_event

LOCK_NAME = "gateway.lock"
SUCCESSOR_LOCK_NAME = "successor.lock"


@dataclass(frozen=True)
class DataDirLock:
    """A held lock: ``fd`` must be passed to the gateway (``pass_fds``) so it shares it."""

    path: Path
    fd: int
    waited_seconds: float


def lock_path(state_dir: Path) -> Path:
    """The lock file: in the entrypoint's own folder on the data volume."""
    return state_dir / LOCK_NAME


def _holder(fd: int) -> str:
    """Who holds the lock, from what the holder wrote into the file (advisory, may be empty)."""
    with contextlib.suppress(OSError, ValueError):
        info = json.loads(os.pread(fd, 4096, 0) or b"{}")
        if isinstance(info, dict) and info:
            return f"PID {info.get('pid')} on {info.get('host')} since {info.get('since')}"
    return "an unknown process"


def _write_holder(fd: int) -> None:
    record = {
        "pid": os.getpid(),
        "host": socket.gethostname(),
        "since": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    os.ftruncate(fd, 0)
    os.pwrite(fd, json.dumps(record).encode() + b"\n", 0)


@contextlib.contextmanager
def open_lock_file(path: Path) -> Iterator[int]:
    """The lock file's descriptor (not locked yet), closed at the end of the block.

    Opened before the wait so a process started meanwhile (the warm gateway) can inherit it:
    a ``flock`` taken later on this descriptor is then held by that process too.
    """
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o640)
    except OSError as exc:
        raise RuntimeFailure(f"cannot open the data dir lock {path}: {exc.strerror}") from exc
    try:
        yield fd
    finally:
        os.close(fd)  # releases it, unless a gateway child still holds the inherited copy


@contextlib.contextmanager
def hold_data_dir_lock(
    path: Path,
    timeout: float,
    *,
    fd: int | None = None,
    while_waiting: Callable[[], None] = lambda: None,
    poll_interval: float = 0.05,
    log_interval: float = 5.0,
) -> Iterator[DataDirLock]:
    """Wait up to ``timeout`` seconds for the exclusive lock on ``path``, then hold it.

    ``fd``: an already open descriptor of ``path`` (``open_lock_file``); else one is opened
    here. While waiting, a log line names the holder every ``log_interval`` seconds and
    ``while_waiting()`` runs between polls; after ``timeout`` a ``RuntimeFailure`` says who
    holds it. A SIGTERM while waiting simply ends the process: nothing has been touched yet.
    """
    with contextlib.ExitStack() as stack:
        if fd is None:
            fd = stack.enter_context(open_lock_file(path))
        waited = _wait_for_lock(fd, path, timeout, poll_interval, log_interval, while_waiting)
        _write_holder(fd)
        log_event("agent.lock.acquired", lock=str(path), waited_seconds=round(waited, 3))
        yield DataDirLock(path, fd, waited)


def release_data_dir_lock(lock: DataDirLock) -> None:
    """Release the lock before the process ends (its gateway must be gone): the successor can
    start while this pod still lingers on the network (``runner.py``)."""
    fcntl.flock(lock.fd, fcntl.LOCK_UN)
    log_event("agent.lock.released", lock=str(lock.path))


def _wait_for_lock(
    fd: int,
    path: Path,
    timeout: float,
    poll_interval: float,
    log_interval: float,
    while_waiting: Callable[[], None],
) -> float:
    next_log = 0.0

    def still_waiting(waited: float) -> bool:
        nonlocal next_log
        while_waiting()
        if waited >= timeout:
            raise RuntimeFailure(
                f"timed out after {timeout:.0f} s waiting for the data dir lock {path}: "
                f"another gateway ({_holder(fd)}) is still running on this data volume; "
                "only one may use it at a time"
            )
        if waited >= next_log:
            log_event(
                "agent.lock.waiting",
                lock=str(path),
                holder=_holder(fd),
                waited_seconds=round(waited, 1),
                timeout_seconds=timeout,
            )
            next_log = waited + log_interval
        return True

    waited = wait_for_flock(fd, still_waiting, poll_interval)
    assert waited is not None  # still_waiting never gives up: it raises on the timeout
    return waited
