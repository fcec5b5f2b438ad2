"""Group commit for the turn hook: queued writes, committed by one thread in batches.

A turn's own SQLite write transaction (two messages, their FTS5 postings,
context items, embedding queue, host state) cost ~1.3 ms, almost all of it
per transaction, not per row: FTS5 writes a segment and SQLite commits the
WAL once per transaction. The gateway's turn hook therefore only prepares a
turn's rows and queues them here (``submit``); a writer thread commits
whatever is queued in one transaction every ``interval`` seconds (or sooner,
once ``batch_messages`` are queued). The same ``apply`` writes every job,
queued or not: a synchronous write is a batch of one.

Rules that keep this lossless and consistent:

- Order: every other write, and every read that must see stored messages,
  first commits the queue (``flush``), on the caller's thread, under the
  store's write lock (so it also waits for a batch the thread is writing).
- What the host holds (``host_state``) is written with the messages it
  describes, in the same job. While a job is queued, its state is the
  session's state for the next sync (``pending_state``), so a sync never
  reads a state older than what it queued before.
- A failed batch is rolled back, and every job queued behind it is dropped
  too (they were planned on the failed jobs' state); the error is kept and
  raised by the next ``submit`` or ``flush`` in any thread, never swallowed.
  The dropped messages are still in the host's transcript: the next sync of
  the session aligns with the state last committed and stores them again.
  A crash (SIGKILL) loses the queue the same way, and recovers the same way.
- A job planned on a state a failure dropped meanwhile (another thread's
  sync read it just before) would claim the dropped messages as stored:
  every failure starts a new ``generation``, and a job planned in an older
  one is refused (``StalePlan``); the next sync plans it again.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from hermes_runtime.common.errors import RuntimeFailure

logger = logging.getLogger(__name__)


class StalePlan(RuntimeFailure):
    """A write planned on a host state that a failed batch dropped since."""


# Queued messages that wake the writer before its interval is up.
BATCH_MESSAGES = 1_000
# Queued messages past which ``submit`` commits inline (memory stays bounded).
MAX_QUEUED_MESSAGES = 20_000


# What the host holds: JSON text as stored, or the dict a sync made (encoded at commit,
# once a batch per session: the hook does not pay a JSON encoding per turn).
HostState = str | dict[str, Any]


@dataclass
class Job:
    """One ingest: prepared rows of one session, and the host state saved with them."""

    session_id: str
    rows: list[dict[str, Any]]
    stamp: float
    host_state: HostState | None = None
    replay_window: float = 0.0
    merged: int = 0  # messages the sync collapsed as a host-merged replay (metrics)
    ticket: int = 0
    stored: list[Any] = field(default_factory=list)


class WriteBehind:
    """The queue, its writer thread, the pending host states and the error to raise."""

    def __init__(
        self,
        commit: Callable[[list[Job]], None],
        lock: threading.RLock,
        interval: float,
        batch_messages: int = BATCH_MESSAGES,
        on_exit: Callable[[], None] | None = None,
    ) -> None:
        """``commit`` writes jobs in one transaction (called with ``lock`` held)."""
        self._commit = commit
        self._lock = lock
        self._interval = interval
        self._batch_messages = batch_messages
        self._on_exit = on_exit
        self._cond = threading.Condition(threading.Lock())
        self._queue: list[Job] = []
        self._queued_messages = 0
        self._unsettled = 0  # queued or being committed
        self._first_queued_at = 0.0
        self._pending: dict[str, tuple[int, HostState]] = {}  # session -> (ticket, state)
        self._tickets = 0
        self._error: BaseException | None = None
        self.generation = 0  # failures so far: a plan of an older generation is stale
        self._stopping = False
        self._thread: threading.Thread | None = None
        self.batches = 0  # committed
        self.failures = 0  # rolled back

    # -- callers -------------------------------------------------------------

    def submit(self, job: Job, planned: int | None = None) -> None:
        """Queue a job; raises the error of a batch that failed since the last call.

        ``planned``: the ``generation`` of the state the job was planned on.
        """
        with self._cond:
            self._raise_error()
            self._check_plan(planned)
            if self._stopping:
                raise RuntimeError("LCM write-behind queue is closed")
            self._tickets += 1
            job.ticket = self._tickets
            if not self._queue:
                self._first_queued_at = time.monotonic()
            self._queue.append(job)
            self._queued_messages += len(job.rows)
            self._unsettled += 1
            if job.host_state is not None:
                self._pending[job.session_id] = (job.ticket, job.host_state)
            backlog = self._queued_messages
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="lcm-group-commit", daemon=True
                )
                self._thread.start()
            if len(self._queue) == 1 or backlog >= self._batch_messages:
                self._cond.notify_all()  # the first job starts the interval; a full batch ends it
        if backlog >= MAX_QUEUED_MESSAGES:
            self.flush()

    def pending_state(self, session_id: str) -> tuple[HostState | None, int]:
        """The host state a queued job will store for the session (or None), and the
        generation to plan the next job in."""
        with self._cond:
            found = self._pending.get(session_id)
            generation = self.generation
        return (found[1] if found is not None else None), generation

    def check_plan(self, planned: int | None) -> None:
        """Refuse a write planned before the latest failure (``StalePlan``)."""
        with self._cond:
            self._check_plan(planned)

    def _check_plan(self, planned: int | None) -> None:
        if planned is not None and planned != self.generation:
            raise StalePlan(
                "LCM: a group commit failed while this write was planned; "
                "the next sync of the session stores it"
            )

    def settled(self) -> bool:
        """Nothing queued or being committed and no error to report (no lock: a hint)."""
        return self._unsettled == 0 and self._error is None

    def flush(self) -> None:
        """Commit everything queued so far, here; raise any error a batch met."""
        with self._lock:  # a batch the thread is writing finishes first
            self._drain(record=False)
            with self._cond:
                self._raise_error()

    def stop(self) -> None:
        """Commit what is queued and end the writer thread (the queue then refuses jobs)."""
        with self._cond:
            self._stopping = True
            thread = self._thread
            self._cond.notify_all()
        if thread is not None:
            thread.join()
        self.flush()

    # -- the writer ------------------------------------------------------------

    def _raise_error(self) -> None:
        """Raise (once) the error a batch met; call with ``_cond`` held."""
        error, self._error = self._error, None
        if error is not None:
            raise error

    def _run(self) -> None:
        try:
            while self._wait_for_batch():
                try:
                    with self._lock:
                        self._drain(record=True)
                except Exception:  # recorded by _drain, raised to the next caller
                    continue
        finally:
            if self._on_exit is not None:
                self._on_exit()

    def _wait_for_batch(self) -> bool:
        """Wait until a batch is due (interval since the first job, or enough queued)."""
        with self._cond:
            while not self._queue and not self._stopping:
                self._cond.wait()
            while not self._stopping and self._queued_messages < self._batch_messages:
                left = self._first_queued_at + self._interval - time.monotonic()
                if left <= 0 or not self._queue:
                    break
                self._cond.wait(left)
            return bool(self._queue) or not self._stopping

    def _drain(self, record: bool) -> None:
        """Commit the queue in one transaction; call with the store's write lock held.

        On failure every queued job is dropped with the failed batch and the
        pending states are forgotten (see the module docstring); ``record``
        keeps the error for the next caller, else it is raised here.
        """
        with self._cond:
            jobs, self._queue, self._queued_messages = self._queue, [], 0
        if not jobs:
            return
        try:
            self._commit(jobs)
        except BaseException as exc:
            with self._cond:
                dropped = jobs + self._queue
                self._queue, self._queued_messages = [], 0
                self._unsettled -= len(dropped)
                self._pending.clear()
                self.failures += 1
                self.generation += 1
                if record:
                    self._error = exc
            logger.warning(
                "LCM: a group commit of %d turn writes failed (%s); the next sync of each "
                "session stores them again from the host's transcript",
                len(dropped),
                exc,
            )
            raise
        with self._cond:
            self._unsettled -= len(jobs)
            last = jobs[-1].ticket
            for session in [s for s, (ticket, _) in self._pending.items() if ticket <= last]:
                del self._pending[session]
            self.batches += 1
