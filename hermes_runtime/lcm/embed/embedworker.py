"""The background thread that keeps vectors current while the agent runs.

Why a module of its own: a gateway embeds beside its turns, never in them.
The worker drains the queue newest first at a lower CPU priority, queues
the history lacking its model's vectors when it starts (a model change
re-embeds in the background), and notes its errors (``errors``, the last
twenty) instead of failing the agent: the queue keeps the work. Freeing an idle model is
logged (``lcm.embeddings.model_released``), so an operator reading a pod's memory fall (or a
slower first search after a quiet hour) finds why in the log.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass, field

from hermes_runtime.common.idlememory import return_freed_memory
from hermes_runtime.common.logs import log_event
from hermes_runtime.lcm.embed.embedbatch import embed_batch
from hermes_runtime.lcm.embed.embedders import (
    EMBEDDING_NICE,
    Embedder,
    ReleasesIdleModel,
    RunsAProcess,
)
from hermes_runtime.lcm.embed.embedqueue import enqueue_missing
from hermes_runtime.lcm.store.lcmstore import LcmStore


def lower_this_thread(nice: int = EMBEDDING_NICE) -> bool:
    """Lower the calling thread's CPU priority by ``nice`` (threads it starts inherit it).

    Relative to the process's own niceness, never above 19: a gateway run
    under ``nice`` keeps its worker below its turns (as root, setting an
    absolute 10 would have raised a worker of a process at 19).
    """
    try:
        thread = threading.get_native_id()
        current = os.getpriority(os.PRIO_PROCESS, thread)
        os.setpriority(os.PRIO_PROCESS, thread, min(19, current + nice))
    except (OSError, AttributeError):
        return False
    return True


@dataclass
class EmbeddingWorker:
    """A daemon thread that drains the queue; ``wake()`` after ingest, ``stop()`` at exit.

    Newest items first: a live turn becomes searchable at once even behind a
    backlog, and ``lcm embed`` (oldest first) can drain the same queue beside
    it. The thread runs at ``EMBEDDING_NICE`` with one core's embedder (the
    engine's), so turns keep the other core and first call on this one.
    """

    store: LcmStore
    embedder: Embedder
    idle_seconds: float = 2.0
    # Free the model after this long without a call (0: keep it): an idle agent need not hold
    # it, and a first search after idling loads it again in well under a second.
    release_after: float = 0.0
    nice: int = EMBEDDING_NICE
    errors: list[str] = field(default_factory=list)
    _event: threading.Event = field(default_factory=threading.Event)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="lcm-embeddings", daemon=True)
            self._thread.start()

    def wake(self) -> None:
        self._event.set()

    def stop(self, timeout: float = 5.0) -> None:
        """Stop the thread, then end the embedder's own process if it has one."""
        self._stop.set()
        self._event.set()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None
        if isinstance(self.embedder, RunsAProcess):
            self.embedder.close()

    def _run(self) -> None:
        # Embeds committed items only: it neither waits for the turn hook's queue nor
        # takes the error of a failed batch away from the hook and the readers.
        self.store.db.skip_flush_on_this_thread()
        lower_this_thread(self.nice)
        try:
            enqueue_missing(self.store, self.embedder.model)
        except Exception as exc:  # the queue still holds new items; retried at next start
            self.errors.append(f"backfill: {type(exc).__name__}: {exc}"[:300])
        while not self._stop.is_set():
            try:
                if embed_batch(self.store, self.embedder, oldest_first=False).taken:
                    continue
            except Exception as exc:  # keep the agent running; the queue keeps the work
                self.errors.append(f"{type(exc).__name__}: {exc}"[:300])
                del self.errors[:-20]
            self._event.wait(self.idle_seconds)
            self._event.clear()
            self._release_idle_model()
        self.store.close()

    def _release_idle_model(self) -> None:
        if self.release_after <= 0 or not isinstance(self.embedder, ReleasesIdleModel):
            return
        if self.embedder.release_idle(self.release_after):
            return_freed_memory()  # the agent goes idle: what its turns freed goes back too
            log_event(
                "lcm.embeddings.model_released",
                model=self.embedder.model,
                idle_seconds=self.release_after,
            )
