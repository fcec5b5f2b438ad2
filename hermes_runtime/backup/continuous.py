"""Continuous replication: ``litestream replicate`` over every SQLite database of the data dir.

Why a supervisor of our own around Litestream: Hermes and its plugins create databases under
any name at any time, and Litestream's own directory mode matches names, not contents. We
find databases the way ``backup create`` does (by their 16-byte header, same excludes), write
Litestream's config (temp file + rename; paths, bucket, endpoint and region only: credentials
stay in the environment), run ``litestream replicate`` as a child, and restart it with a new
config when the set of databases changes. A child that dies is restarted with backoff.

Which databases: those in WAL mode (header byte 18 is 2) with at least one table. Litestream
would switch a rollback-journal database to WAL under its owner's feet, and it adds its two
bookkeeping tables (``_litestream_seq``, ``_litestream_lock``) to every database it
replicates, which must not happen before the owner has created its schema. Other databases
are left to the scheduled backup, and the log says which.

Litestream's local state (its copy of recent LTX files, per database) lives on the data
volume under ``.hermes-runtime/litestream/``, which backups exclude: a restarted pod then
resumes where it stopped instead of uploading a full snapshot of every database. Replication
runs under the shared umask (``common/groupaccess.py``): what it creates on the data volume
stays the pod's group's to write, as the agent's files are replication's.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

import apsw

from hermes_runtime.backup.litestream import litestream_binary, litestream_env
from hermes_runtime.backup.replicas.base import Replicas
from hermes_runtime.backup.selection import SQLITE_HEADER, make_excluder, scan_data_dir
from hermes_runtime.common.atomic import atomic_write_text
from hermes_runtime.common.backoff import Backoff
from hermes_runtime.common.errors import RuntimeFailure
from hermes_runtime.common.flock import wait_for_flock
from hermes_runtime.common.groupaccess import shared_umask
from hermes_runtime.common.logs import log_event

META_RELPATH = ".hermes-runtime/litestream"
WAL_FORMAT = 2  # header bytes 18-19: 1 = rollback journal, 2 = WAL
STOP_TIMEOUT_SECONDS = 40.0  # Litestream syncs once more on SIGTERM (30 s at most by default)
MAX_BACKOFF_SECONDS = 60.0
POLL_SECONDS = 0.2
LOCK_NAME = "replicate.lock"  # in META_RELPATH: one replicator per data volume


@dataclass(frozen=True)
class ReplicationSettings:
    """How often Litestream looks at the WAL and ships it; the RPO is about their sum."""

    sync_interval_seconds: float = 1.0
    rescan_seconds: float = 10.0
    excludes: tuple[str, ...] = ()


@dataclass
class Found:
    """Databases found by one scan: those replicated and those left to the scheduled backup."""

    replicated: list[str] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)


def find_replicable(data_dir: Path, excludes: tuple[str, ...] = ()) -> Found:
    """The databases of ``data_dir`` Litestream may replicate, found by header like a backup."""
    found = Found()
    for db in scan_data_dir(data_dir, make_excluder(excludes)).databases:
        reason = _not_replicable(data_dir / db.relpath)
        if reason:
            found.skipped[db.relpath] = reason
        else:
            found.replicated.append(db.relpath)
    found.replicated.sort()
    return found


def _not_replicable(path: Path) -> str | None:
    try:
        with path.open("rb") as fh:
            header = fh.read(20)
    except OSError as exc:
        return f"unreadable: {exc}"
    if not header.startswith(SQLITE_HEADER) or len(header) < 20:
        return "not a database any more"
    if header[18] != WAL_FORMAT:
        return "not in WAL mode (the scheduled backup covers it)"
    if not os.access(path, os.W_OK):  # Litestream writes the database and its -wal/-shm
        return (
            f"not writable by UID {os.geteuid()} (its owner made it private to itself; the "
            "scheduled backup covers it when it can read it)"
        )
    try:
        conn = apsw.Connection(str(path), flags=apsw.SQLITE_OPEN_READONLY)
        try:
            conn.set_busy_timeout(1000)
            tables = conn.execute("SELECT count(*) FROM sqlite_schema").fetchall()[0][0]
        finally:
            conn.close()
    except apsw.Error as exc:
        return f"cannot read its schema yet: {exc}"
    return None if tables else "no table yet (its owner has not created its schema)"


def litestream_config(
    data_dir: Path, location: Replicas, databases: list[str], settings: ReplicationSettings
) -> dict[str, Any]:
    """Litestream's config: one entry per database, its replica under the target's prefix."""
    interval = f"{int(settings.sync_interval_seconds * 1000)}ms"
    dbs = []
    for relpath in databases:
        replica = {**location.replica_config(relpath), "sync-interval": interval}
        dbs.append(
            {
                "path": str(data_dir / relpath),
                "meta-path": str(data_dir / META_RELPATH / f"{relpath}-litestream"),
                "monitor-interval": interval,
                "replica": replica,
            }
        )
    return {"logging": {"level": "info", "type": "json", "stderr": True}, "dbs": dbs}


def write_config(path: Path, config: dict[str, Any]) -> None:
    """JSON is YAML: no quoting rules to get wrong. Replaced atomically, mode 0600."""
    atomic_write_text(path, json.dumps(config, indent=2) + "\n", mode=0o600)


@dataclass
class _Child:
    """The running ``litestream replicate`` and the databases it was started for."""

    process: subprocess.Popen[bytes]
    databases: list[str]
    started: float = field(default_factory=time.monotonic)


@dataclass
class Replicator:
    """Keeps ``litestream replicate`` running over the current set of databases until stopped."""

    data_dir: Path
    location: Replicas
    config_path: Path
    settings: ReplicationSettings = field(default_factory=ReplicationSettings)
    stopping: bool = False  # set by a signal handler: a plain flag, no lock to deadlock on
    _child: _Child | None = None
    _failures: int = 0
    _skipped: dict[str, str] = field(default_factory=dict)

    def run(self) -> None:
        """Scan, (re)start the child when needed, sleep; return after ``stop()``."""
        binary = litestream_binary()  # fail now, naming it, rather than at the first database
        log_event(
            "backup.replicate.started",
            data_dir=str(self.data_dir),
            target=self.location.url,
            litestream=binary,
        )
        try:
            while not self.stopping:
                self._tick(binary)
                deadline = time.monotonic() + self._wait_seconds()
                while not self.stopping and time.monotonic() < deadline:
                    time.sleep(min(POLL_SECONDS, max(0.0, deadline - time.monotonic())))
        finally:
            self._stop_child("stopping")
            log_event("backup.replicate.stopped")

    def stop(self) -> None:
        self.stopping = True

    def _wait_seconds(self) -> float:
        if self._failures:
            first = min(self.settings.rescan_seconds, MAX_BACKOFF_SECONDS)
            return Backoff(first=first, cap=MAX_BACKOFF_SECONDS).delay(self._failures - 1)
        return self.settings.rescan_seconds

    def _tick(self, binary: str) -> None:
        found = find_replicable(self.data_dir, self.settings.excludes)
        child = self._child
        if child is not None:
            # Once replicated, a database stays until it is gone: a schema read that hit a
            # lock must not restart Litestream twice.
            kept = [db for db in child.databases if db in found.skipped]
            found.replicated = sorted({*found.replicated, *kept})
            for db in kept:
                del found.skipped[db]
        if found.skipped != self._skipped:
            self._skipped = dict(found.skipped)
            if found.skipped:
                log_event("backup.replicate.skipped", databases=found.skipped)
        if child is not None and child.process.poll() is not None:
            self._failures += 1
            log_event(
                "backup.replicate.exited",
                exit_code=child.process.returncode,
                restart_in_seconds=self._wait_seconds(),
            )
            self._child = None
            return
        if child is not None and child.databases == found.replicated:
            if time.monotonic() - child.started > MAX_BACKOFF_SECONDS:
                self._failures = 0
            return
        self._stop_child("databases changed")
        if found.replicated:
            self._start_child(binary, found.replicated)

    def _start_child(self, binary: str, databases: list[str]) -> None:
        config = litestream_config(self.data_dir, self.location, databases, self.settings)
        write_config(self.config_path, config)
        args = [binary, "replicate", "-no-expand-env", "-config", str(self.config_path)]
        process = subprocess.Popen(args, env=litestream_env(self.location.env))
        self._child = _Child(process, databases)
        log_event("backup.replicate.databases", databases=databases, pid=process.pid)

    def _stop_child(self, reason: str) -> None:
        child, self._child = self._child, None
        if child is None or child.process.poll() is not None:
            return
        log_event("backup.replicate.stopping", reason=reason, pid=child.process.pid)
        child.process.send_signal(signal.SIGTERM)  # Litestream syncs the last frames, then exits
        try:
            child.process.wait(timeout=STOP_TIMEOUT_SECONDS)
        except subprocess.TimeoutExpired:
            child.process.kill()
            child.process.wait()


@contextlib.contextmanager
def stop_on_signals(stop: Callable[[], None]) -> Iterator[None]:
    """SIGTERM and SIGINT end the replication cleanly (the kubelet's stop, Ctrl-C)."""

    def handler(signum: int, frame: FrameType | None) -> None:
        stop()

    previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


@shared_umask()
def replicate(
    data_dir: Path,
    location: Replicas,
    *,
    settings: ReplicationSettings | None = None,
    work_dir: Path | None = None,
) -> None:
    """Replicate every database of ``data_dir`` continuously until SIGTERM or SIGINT."""
    if not data_dir.is_dir():
        raise RuntimeFailure(f"--data-dir {data_dir}: not a directory")
    location.check_reachable()
    scratch = Path(work_dir or tempfile.gettempdir())  # Python's rule: $TMPDIR, else /tmp
    scratch.mkdir(parents=True, exist_ok=True)
    with private_folder(scratch) as config_dir:
        replicator = Replicator(
            data_dir.resolve(),
            location,
            config_dir / "litestream.yml",
            settings or ReplicationSettings(),
        )
        with (
            stop_on_signals(replicator.stop),
            replication_lock(replicator.data_dir, lambda: replicator.stopping) as held,
        ):
            if held:
                replicator.run()


@contextlib.contextmanager
def private_folder(scratch: Path) -> Iterator[Path]:
    """A new folder in ``scratch`` only this process's user can enter, removed afterwards.

    Litestream runs whatever its config's ``exec:`` names, with the bucket keys in its
    environment: whoever can replace the config between our write and Litestream's read owns
    those keys. A fresh ``mkdtemp`` folder (mode 0700, a name nobody can guess or pre-create)
    leaves no moment where another user can swap the file, even in a shared ``/tmp``.
    """
    folder = Path(tempfile.mkdtemp(prefix="hermes-litestream-", dir=scratch))
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


@contextlib.contextmanager
def replication_lock(data_dir: Path, stopping: Callable[[], bool]) -> Iterator[bool]:
    """Hold the data volume's replication lock; wait for it while another replicator has it.

    With ``agent.updateStrategy: RollingUpdate`` the new pod (and its replicate sidecar)
    starts while the old pod still runs. Two Litestream processes on one database and one
    replica would both checkpoint and both write the replica's generations; the new one
    waits here until the old pod's sidecar exits (its lock goes with its process). Yields
    False when stopped while waiting.
    """
    path = data_dir / META_RELPATH / LOCK_NAME
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    logged = False

    def still_waiting(waited: float) -> bool:
        nonlocal logged
        if stopping():
            return False
        if not logged:
            log_event("backup.replicate.waiting", lock=str(path), holder="another replicator")
            logged = True
        return True

    try:
        if wait_for_flock(fd, still_waiting, POLL_SECONDS) is None:
            yield False
            return
        if logged:
            log_event("backup.replicate.lock_taken", lock=str(path))
        yield True
    finally:
        os.close(fd)
