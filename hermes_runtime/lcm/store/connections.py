"""Who owns the LCM database's connections: one a thread, the write lock, the busy timeout.

Why a class of its own: the store writes, reads and starts threads; what a
connection needs is a separate concern, kept here alone: open it (checked, WAL on, the
schema migrated under the write lock), give each thread its own (apsw
connections are not shared across threads here), bound how long a thread
waits on another process's write lock, and close. Per-thread flags that the
store's write path reads (``writing``, ``no_flush``, ``planned``,
``fulltext_attached``) live on ``local``.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from pathlib import Path

import apsw

from hermes_runtime.common.errors import RuntimeFailure
from hermes_runtime.common.sqlite import connect, enable_wal
from hermes_runtime.lcm.store.checkpoints import Checkpointer
from hermes_runtime.lcm.store.patterns import regexp
from hermes_runtime.lcm.store.schema import check_lcm_database, migrate

DEFAULT_BUSY_TIMEOUT_MS = 30_000


class LcmConnections:
    """This thread's connection to one LCM database, and the in-process write lock."""

    def __init__(self, db_path: Path, readonly: bool) -> None:
        """Only records what to open: nothing is opened, no thread is started."""
        self.db_path = db_path
        self.readonly = readonly
        self.local = threading.local()
        self.write_lock = threading.RLock()
        # Set by the store when its checkpoints run on a thread (``checkpoints.py``).
        self.checkpointer: Checkpointer | None = None

    def require_file(self) -> None:
        if not self.db_path.is_file():
            raise RuntimeFailure(f"LCM database {self.db_path}: no such file")

    def open_readonly(self) -> None:
        """Open this thread's connection and refuse a file without the LCM schema."""
        try:
            check_lcm_database(self.connection(), self.db_path, allow_empty=False)
        except BaseException:
            self.close()
            raise

    def open_for_writing(self, create: bool) -> None:
        """Check the file before anything changes it, then WAL on and the schema migrated."""
        self.db_path.parent.mkdir(parents=True, exist_ok=True)
        try:
            conn = connect(
                self.db_path, busy_timeout_ms=DEFAULT_BUSY_TIMEOUT_MS, wal=False, uri=True
            )
        except apsw.Error as exc:
            raise RuntimeFailure(f"LCM database {self.db_path}: {exc}") from exc
        try:
            check_lcm_database(conn, self.db_path, allow_empty=create)
            set_wal(conn)
            with self.write_lock:
                migrate(conn)
        except apsw.Error as exc:
            conn.close()
            raise RuntimeFailure(f"LCM database {self.db_path}: {exc}") from exc
        except BaseException:
            conn.close()
            raise
        self.adopt(conn)

    def connection(self) -> apsw.Connection:
        """This thread's connection (apsw connections are not shared across threads here)."""
        conn = getattr(self.local, "conn", None)
        if conn is None:
            try:
                conn = connect(
                    self.db_path,
                    readonly=self.readonly,
                    busy_timeout_ms=DEFAULT_BUSY_TIMEOUT_MS,
                    wal=False,
                    uri=True,
                )
            except apsw.Error as exc:
                raise RuntimeFailure(f"LCM database {self.db_path}: {exc}") from exc
            if not self.readonly:
                set_wal(conn)
            self.adopt(conn)
        return conn

    def adopt(self, conn: apsw.Connection) -> None:
        """Make ``conn`` this thread's: ``regexp`` defined, checkpoints handed off if they run."""
        conn.create_scalar_function("regexp", regexp, 2, deterministic=True)  # type: ignore[arg-type]
        if self.checkpointer is not None and not self.readonly:
            self.checkpointer.install(conn)
        self.local.conn = conn
        self.local.fulltext_attached = False

    def skip_flush_on_this_thread(self) -> None:
        """This thread's reads and writes never commit the store's queue (nor raise its errors).

        For a background thread that works on committed rows only (the
        embedding worker): the queued turns are nothing to it, and an error of
        a failed batch belongs to the hook and the readers that need the turns.
        """
        self.local.no_flush = True

    @contextlib.contextmanager
    def busy_timeout(self, milliseconds: int) -> Iterator[None]:
        """Bound how long this thread waits on another process's write lock.

        Background work that must not stall its caller (the per-turn sync
        runs on Hermes' reply path) gives up with ``apsw.BusyError`` after
        ``milliseconds`` instead of the default 30 s; the next sync catches up.
        """
        conn = self.connection()
        conn.set_busy_timeout(milliseconds)
        try:
            yield
        finally:
            conn.set_busy_timeout(DEFAULT_BUSY_TIMEOUT_MS)

    def close(self) -> None:
        """Close this thread's connection (the next use opens another)."""
        conn = getattr(self.local, "conn", None)
        if conn is not None:
            conn.close()
            self.local.conn = None


def set_wal(conn: apsw.Connection) -> None:
    """WAL (readers beside the writer) and NORMAL sync; only ever on an LCM database."""
    enable_wal(conn, DEFAULT_BUSY_TIMEOUT_MS / 1000)
