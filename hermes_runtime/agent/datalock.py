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

The successor: a pod waiting for the lock holds a second ``flock``, on ``successor.lock``, once
it is ready to take over (its gateway imported, ``zygote.py``), and writes into that file
where it can be reached. The pod being replaced waits for that in its preStop hook while it
still serves (``waiting_successor``), then forwards new clients to it (``frontdoor.py``).
Before the data dir lock, the only writes to the volume are these two lock files.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import json
import os
import socket
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from hermes_runtime.common.errors import RuntimeFailure
from hermes_runtime.common.flock import try_flock, wait_for_flock
from hermes_runtime.common.logs import log_event

LOCK_NAME = "gateway.lock"
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
    ready: Callable[[], bool] = lambda: True,
    me: Successor | None = None,
    poll_interval: float = 0.05,
    log_interval: float = 5.0,
) -> Iterator[DataDirLock]:
    """Wait up to ``timeout`` seconds for the exclusive lock on ``path``, then hold it.

    ``fd``: an already open descriptor of ``path`` (``open_lock_file``); else one is opened
    here. While waiting, a log line names the holder every ``log_interval`` seconds, and once
    ``ready()`` this process announces itself as the successor, with where it can be reached
    (``me``; ``waiting_successor`` reads it); after
    ``timeout`` a ``RuntimeFailure`` says who holds it. A SIGTERM while waiting simply ends the
    process: nothing has been touched yet.
    """
    with contextlib.ExitStack() as stack:
        if fd is None:
            fd = stack.enter_context(open_lock_file(path))
        with _Announcement(path.with_name(SUCCESSOR_LOCK_NAME), ready, me) as successor:
            waited = _wait_for_lock(fd, path, timeout, poll_interval, log_interval, successor)
        _write_holder(fd)
        log_event("agent.lock.acquired", lock=str(path), waited_seconds=round(waited, 3))
        yield DataDirLock(path, fd, waited)


def release_data_dir_lock(lock: DataDirLock) -> None:
    """Release the lock before the process ends (its gateway must be gone): the successor can
    start while this pod still lingers on the network (``runner.py``)."""
    fcntl.flock(lock.fd, fcntl.LOCK_UN)
    log_event("agent.lock.released", lock=str(lock.path))


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
    with contextlib.suppress(OSError, ValueError, TypeError):
        info = json.loads(os.pread(fd, 4096, 0) or b"{}")
        return Successor(str(info["host"]), int(info["api_port"]), int(info["metrics_port"]))
    return Successor()


class _Announcement:
    """Holds ``successor.lock`` from the moment ``ready()`` until the data dir lock is ours,
    with ``me`` (where this pod can be reached) written into it.

    Two pods waiting at once (a delete during a rollout): the first to be ready holds it, the
    other simply waits for the data dir lock."""

    def __init__(self, path: Path, ready: Callable[[], bool], me: Successor | None) -> None:
        self._path = path
        self._ready = ready
        self._me = me or Successor()
        self._fd: int | None = None

    def __enter__(self) -> _Announcement:
        return self

    def __exit__(self, *_exc: object) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def announce(self) -> None:
        """Take the successor lock once ready (non-blocking, retried on every poll)."""
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


def _wait_for_lock(
    fd: int,
    path: Path,
    timeout: float,
    poll_interval: float,
    log_interval: float,
    successor: _Announcement,
) -> float:
    next_log = 0.0

    def still_waiting(waited: float) -> bool:
        nonlocal next_log
        successor.announce()
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
