"""WAL checkpoints on a background thread, off the path of the turn that commits.

SQLite checkpoints inside the commit that pushes the WAL past ``wal_autocheckpoint``
pages: that one commit copies the pages into the database file and waits for two
fsyncs, so every so many turns one turn's hook waits for a checkpoint, longest on a
busy disk. A long-lived engine instead lets each commit only note the WAL's size (a
WAL hook) and wakes this thread, which runs a PASSIVE checkpoint on its own
connection: it never blocks a writer, and writers keep appending while it copies.

Durability does not change: a commit is in the WAL when it returns either
way (``synchronous = NORMAL``: safe against a process crash, not against
power loss before the OS writes it), and a checkpoint only moves committed
pages into the database file, with the same fsyncs as before.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

import apsw

WAL_PAGES = 1_000  # SQLite's own autocheckpoint threshold

logger = logging.getLogger(__name__)


class Checkpointer:
    """One thread that checkpoints a database whenever a writer found its WAL grown."""

    def __init__(
        self,
        connection: Callable[[], apsw.Connection],
        release: Callable[[], None],
        pages: int = WAL_PAGES,
    ) -> None:
        """``connection`` gives the calling thread's own connection, ``release`` closes it.

        Nothing starts here: ``start`` starts the thread, and only then does
        ``install`` hand a connection's checkpoints to it (before, SQLite's own
        autocheckpoint stays, so a checkpointer never started never lets the WAL grow).
        """
        self._connection = connection
        self._release = release
        self._pages = pages
        self._due = threading.Event()
        self._stopping = threading.Event()
        self.checkpoints = 0
        self._thread = threading.Thread(target=self._run, name="lcm-checkpoint", daemon=True)
        self._started = False

    def start(self) -> None:
        """Start the checkpoint thread (once); ``install`` connections after this."""
        if not self._started:
            self._started = True
            self._thread.start()

    def install(self, conn: apsw.Connection) -> None:
        """Make a writing connection hand its checkpoints to this thread.

        A WAL hook replaces SQLite's autocheckpoint on that connection (they
        share one slot), so its commits never checkpoint themselves. Before
        ``start`` (or after ``stop``) it does nothing: no thread would checkpoint.
        """
        if self._started and not self._stopping.is_set():
            conn.set_wal_hook(self._after_commit)

    def _after_commit(self, _conn: apsw.Connection, _name: str, pages: int) -> int:
        if pages >= self._pages:
            self._due.set()
        return apsw.SQLITE_OK

    def _run(self) -> None:
        try:
            self._loop()
        finally:
            self._release()

    def _loop(self) -> None:
        while True:
            self._due.wait()
            self._due.clear()
            if self._stopping.is_set():
                return
            try:
                self._connection().wal_checkpoint(mode=apsw.SQLITE_CHECKPOINT_PASSIVE)
                self.checkpoints += 1
            except apsw.BusyError:  # another checkpoint runs (a closing connection, a backup)
                continue  # the next commit past the threshold wakes us again
            except apsw.Error as exc:
                logger.warning("LCM: WAL checkpoint failed: %s", exc)

    def stop(self, timeout: float = 10.0) -> None:
        self._stopping.set()
        self._due.set()
        if self._started:
            self._thread.join(timeout)
