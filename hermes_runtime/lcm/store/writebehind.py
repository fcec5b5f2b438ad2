"""Group commit for the turn hook: queued writes, committed by one thread in batches.

A turn's own SQLite write transaction (its messages, context items,
embedding queue rows, host state) costs mostly per transaction, not per
row: SQLite commits the WAL once per transaction. (The FTS5 postings are
not written here: the full-text index lives in ``lcm-fts.db`` and its
indexer follows lcm.db, ``fulltext.py``.) The gateway's turn hook therefore
only prepares a turn's rows and queues them here (``submit``); a writer thread commits
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
- A batch that fails for want of storage (``STORAGE_ERRORS``: the volume is
  full, read-only or failing, or another process held the lock too long) is rolled
  back and *kept*: its jobs go back to the head of the queue with their host states,
  and the writer thread tries the whole queue again after a back-off
  (``RETRY_FIRST_SECONDS``, doubling to ``RETRY_MAX_SECONDS``) until it commits. Why
  not drop it: Hermes' API server hands the hook only the request's transcript,
  rebuilt from ``state.db`` (which a full volume fails too) or sent by the client,
  so a dropped turn was never synced again and was lost although the client got its
  answer. The next sync plans on the held jobs' state (``pending_state``), so it
  stores only what is new: nothing twice. While held, ``submit`` still queues, and a
  ``flush`` (a reader that needs the turns, a synchronous write) tries once more and
  raises the storage error to its caller. What stays in memory is lost if the
  process dies before the volume has room again.
- Any other failed batch (a bug, a constraint) is rolled back, and every job
  queued behind it is dropped too (they were planned on the failed jobs'
  state); the error is kept and raised by the next ``submit`` or ``flush`` in
  any thread, never swallowed. A host that keeps its transcript (the CLI,
  Hermes' turn hook after a restart) hands the dropped messages back: the
  next sync of the session aligns with the state last committed and stores
  them again. A crash (SIGKILL) loses the queue the same way.
- A job planned on a state a drop forgot meanwhile (another thread's sync
  read it just before) would claim the dropped messages as stored: every
  drop starts a new ``generation``, and a job planned in an older one is
  refused (``StalePlan``); the next sync plans it again.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

import apsw

from hermes_runtime.common.errors import RuntimeFailure
from hermes_runtime.lcm import metrics
from hermes_runtime.lcm.records import HostState, Job

logger = logging.getLogger(__name__)


class StalePlan(RuntimeFailure):
    """A write planned on a host state that a failed batch dropped since."""


# Queued messages that wake the writer before its interval is up.
BATCH_MESSAGES = 1_000
# Queued messages past which ``submit`` commits inline (memory stays bounded; not while
# a storage failure holds the queue: the inline commit would fail the same way).
MAX_QUEUED_MESSAGES = 20_000
# Failures for want of storage: the batch is kept and tried again (see the docstring).
# OSError: an externalized output's file (``outputs.py``) written with its row;
# CantOpenError: a thread's first connection, opened on the full volume.
STORAGE_ERRORS: tuple[type[BaseException], ...] = (
    apsw.FullError,
    apsw.IOError,
    apsw.BusyError,
    apsw.ReadOnlyError,
    apsw.CantOpenError,
    OSError,
)
RETRY_FIRST_SECONDS = 0.5  # after the first failure of a held batch
RETRY_MAX_SECONDS = 2.0  # the longest wait between two tries of a held batch (cheap: fails fast)


def is_storage_error(exc: BaseException) -> bool:
    """Whether ``exc`` (or the SQLite error it wraps, ``RuntimeFailure(...) from``) is one
    of ``STORAGE_ERRORS``: the write is held and tried again, not dropped."""
    return isinstance(exc, STORAGE_ERRORS) or isinstance(exc.__cause__, STORAGE_ERRORS)


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
        self.interval = interval  # 0: no group commit, a queue only for held writes
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
        self.generation = 0  # drops so far: a plan of an older generation is stale
        self._stopping = False
        self._thread: threading.Thread | None = None
        self.batches = 0  # committed
        self.failures = 0  # rolled back (held or dropped)
        # While a storage failure holds the queue: its error, and when to try again.
        self.held: BaseException | None = None
        self._retry_wait = 0.0
        self._retry_at = 0.0

    # -- callers -------------------------------------------------------------

    def submit(self, job: Job, planned: int | None = None) -> None:
        """Queue a job; raises the error of a batch that failed since the last call.

        ``planned``: the ``generation`` of the state the job was planned on.
        """
        with self._cond:
            self._raise_error()
            self._check_plan(planned)
            backlog = self._enqueue(job)
            held = self.held is not None
        if backlog >= MAX_QUEUED_MESSAGES and not held:
            self.flush()

    def hold(self, job: Job, exc: BaseException, planned: int | None = None) -> None:
        """Queue a job whose own write just failed for want of storage (``exc``): held, it
        is tried again after the back-off, with whatever is queued behind it."""
        with self._cond:
            self._check_plan(planned)
            self._enqueue(job)
            if self.held is None:  # a held queue keeps its own back-off
                self._mark_held(exc)

    def _enqueue(self, job: Job) -> int:
        """Append a job (call with ``_cond`` held); the messages queued now."""
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
        if self.held is not None:
            metrics.TURN_WRITES_HELD.set(len(self._queue))
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="lcm-group-commit", daemon=True)
            self._thread.start()
        if len(self._queue) == 1 or self._queued_messages >= self._batch_messages:
            self._cond.notify_all()  # the first job starts the interval; a full batch ends it
        return self._queued_messages

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
                except Exception:  # held and tried again, or recorded for the next caller
                    if self._stopping:
                        break  # ``stop`` flushes once more and raises what is left
                    continue
        finally:
            if self._on_exit is not None:
                self._on_exit()

    def _wait_for_batch(self) -> bool:
        """Wait until a batch is due: the interval since the first job, or enough queued;
        while a storage failure holds the queue, the back-off instead."""
        with self._cond:
            while not self._queue and not self._stopping:
                self._cond.wait()
            while not self._stopping and self._queue:
                due = self._first_queued_at + self.interval
                if self.held is not None:
                    due = max(due, self._retry_at)
                elif self._queued_messages >= self._batch_messages:
                    break
                left = due - time.monotonic()
                if left <= 0:
                    break
                self._cond.wait(left)
            return bool(self._queue) or not self._stopping

    def _drain(self, record: bool) -> None:
        """Commit the queue in one transaction; call with the store's write lock held.

        On a storage failure the jobs are held (``_hold``); on any other every
        queued job is dropped with the failed batch (``_drop``). Either way the
        error is raised here (the writer thread catches it); ``record`` keeps a
        dropping error for the next caller too.
        """
        with self._cond:
            jobs, self._queue, self._queued_messages = self._queue, [], 0
        if not jobs:
            return
        try:
            self._commit(jobs)
        except BaseException as exc:
            if is_storage_error(exc):
                self._hold(jobs, exc)
            else:
                self._drop(jobs, exc, record)
            raise
        with self._cond:
            self._unsettled -= len(jobs)
            last = jobs[-1].ticket
            for session in [s for s, (ticket, _) in self._pending.items() if ticket <= last]:
                del self._pending[session]
            self.batches += 1
            recovered, self.held = self.held, None
        if recovered is not None:
            metrics.TURN_WRITES_HELD.set(0)
            logger.warning(
                "LCM: the held turn writes are stored (%d in this batch); the volume takes "
                "writes again",
                len(jobs),
            )

    def _hold(self, jobs: list[Job], exc: BaseException) -> None:
        """Put a batch that failed for want of storage back at the head of the queue."""
        with self._cond:
            self._queue = jobs + self._queue
            self._queued_messages = sum(len(job.rows) for job in self._queue)
            self._first_queued_at = time.monotonic()
            self.failures += 1
            self._mark_held(exc)

    def _mark_held(self, exc: BaseException) -> None:
        """Note the storage failure and when to try again (call with ``_cond`` held)."""
        first = self.held is None
        changed = first or str(self.held) != str(exc)
        self.held = exc
        self._retry_wait = (
            RETRY_FIRST_SECONDS if first else min(self._retry_wait * 2, RETRY_MAX_SECONDS)
        )
        self._retry_at = time.monotonic() + self._retry_wait
        metrics.STORAGE_FAILURES.inc()
        metrics.TURN_WRITES_HELD.set(len(self._queue))
        if changed:  # once per episode (and per new error), not once per try
            sessions = sorted({job.session_id for job in self._queue})
            logger.warning(
                "LCM: a turn write failed for want of storage (%s); %d turn writes of "
                "session(s) %s are held in memory and tried again (every %.0f s at most) "
                "until they commit",
                exc,
                len(self._queue),
                ", ".join(sessions[:10]) + (" ..." if len(sessions) > 10 else ""),
                RETRY_MAX_SECONDS,
            )

    def _drop(self, jobs: list[Job], exc: BaseException, record: bool) -> None:
        """Drop a failed batch and everything queued behind it (see the module docstring)."""
        with self._cond:
            dropped = jobs + self._queue
            self._queue, self._queued_messages = [], 0
            self._unsettled -= len(dropped)
            self._pending.clear()
            self.failures += 1
            self.generation += 1
            if self.held is not None:
                self.held = None
                metrics.TURN_WRITES_HELD.set(0)
            if record:
                self._error = exc
        logger.warning(
            "LCM: a group commit of %d turn writes failed (%s); the next sync of each "
            "session stores them again from the host's transcript",
            len(dropped),
            exc,
        )
