"""Embed a whole database now (``lcm embed``), resumable, beside a running gateway.

Why a job of its own: ``lcm import`` only queues its messages (the agent's
worker embeds on one core, in the background), so a fresh import stayed
invisible to semantic search for hours, and the CLI's ``lcm search`` spent
its time embedding the queue in memory on every call.

The queue is the job's state: items lacking this model's vector are queued
(``enqueue_missing``, a page of ids at a time), then drained a batch at a
time, each batch committed with its vectors and the removal of its queue
rows in one transaction. Killed halfway, a rerun continues where the last
commit left off. A gateway's worker may drain the same queue: it takes the
newest items first and this job the oldest, and both skip items that
already have a vector of their model, so they meet in the middle without
embedding anything twice. Every write is one short ``BEGIN IMMEDIATE``
transaction through ``LcmStore.writing``, so the gateway's turns wait for a
batch's insert at most, never for an embedding.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

from hermes_runtime.lcm.embed import embedstatus
from hermes_runtime.lcm.embed.embedbatch import embed_batch
from hermes_runtime.lcm.embed.embedders import Embedder, offline_embedder
from hermes_runtime.lcm.embed.embedqueue import enqueue_missing
from hermes_runtime.lcm.store.lcmstore import LcmStore

JOB_BATCH = 512  # items a commit: seconds of embedding, then one short write
DROP_PAGE = 5_000  # vectors deleted a transaction by --rebuild


@dataclass
class EmbedProgress:
    """Where a job stands: what it found to do, what it did, how fast."""

    model: str
    total: int
    done: int = 0
    already: int = 0  # items another process embedded meanwhile (skipped)
    seconds: float = 0.0

    @property
    def items_per_s(self) -> float:
        return round(self.done / self.seconds, 1) if self.seconds > 0 else 0.0

    @property
    def eta_s(self) -> float | None:
        left = max(0, self.total - self.done - self.already)
        rate = self.items_per_s
        return round(left / rate, 1) if rate > 0 else (0.0 if left == 0 else None)

    def as_dict(self) -> dict[str, object]:
        return {**asdict(self), "items_per_s": self.items_per_s, "eta_s": self.eta_s}


@dataclass
class EmbedResult:
    """What ``embed_database`` did; ``remaining`` is 0 unless it was stopped."""

    model: str
    embedded: int
    already: int
    dropped: int
    remaining: int
    seconds: float
    items_per_s: float

    def as_dict(self) -> dict[str, object]:
        return asdict(self)


def drop_vectors(store: LcmStore, model: str) -> int:
    """Delete every vector of ``model``, a page a transaction (a gateway's writes interleave)."""
    dropped = 0
    while True:
        with store.writing() as conn:
            conn.execute(
                "DELETE FROM embeddings WHERE id IN "
                "(SELECT id FROM embeddings WHERE model = ? LIMIT ?)",
                (model, DROP_PAGE),
            )
            changed = conn.changes()
        dropped += changed
        if changed < DROP_PAGE:
            return dropped


def embed_database(
    store: LcmStore,
    embedder: Embedder,
    *,
    rebuild: bool = False,
    batch_size: int = JOB_BATCH,
    on_progress: Callable[[EmbedProgress], None] | None = None,
    stop: threading.Event | None = None,
) -> EmbedResult:
    """Give every message and summary a vector of ``embedder``'s model; returns the tally.

    ``rebuild`` first deletes this model's vectors, so everything is embedded
    again (after a change of the model's weights under the same name).
    ``on_progress`` is called after each committed batch; ``stop`` ends the
    job after the batch in hand (what is committed stays).
    """
    started = time.perf_counter()
    dropped = drop_vectors(store, embedder.model) if rebuild else 0
    enqueue_missing(store, embedder.model)
    progress = EmbedProgress(embedder.model, embedstatus.embedding_backlog(store, embedder.model))
    if on_progress is not None:
        on_progress(progress)
    while stop is None or not stop.is_set():
        tally = embed_batch(store, embedder, batch_size, oldest_first=True, chunked=False)
        if tally.taken == 0:
            break
        progress.done += tally.embedded
        progress.already += tally.skipped
        progress.seconds = time.perf_counter() - started
        if on_progress is not None:
            on_progress(progress)
    progress.seconds = time.perf_counter() - started
    return EmbedResult(
        embedder.model,
        progress.done,
        progress.already,
        dropped,
        embedstatus.embedding_backlog(store, embedder.model),
        round(progress.seconds, 2),
        progress.items_per_s,
    )


def embedding_status(
    store: LcmStore, name: str, cores: int, model_cache: Path | None = None
) -> embedstatus.EmbeddingStatus:
    """Items lacking a vector of the offline model ``name`` and how long they take to embed
    (``model_cache``: where e5's graph is kept, from the calling process's settings).

    The rate is measured now, in memory, on a sample of the queued texts,
    with one core (the agent's worker) and with ``cores`` (``lcm embed``):
    it depends on this machine, its load and the texts' lengths.
    """
    one = offline_embedder(name, threads=1, model_cache=model_cache)
    status = embedstatus.EmbeddingStatus(
        one.model, embedstatus.embedding_backlog(store, one.model), embedstatus.queue_length(store)
    )
    if status.not_embedded == 0:
        return status
    texts = embedstatus.sample_texts(store)
    if not texts:
        return status
    status.items_per_s_one_core = embedstatus.measured_rate(one.embed, texts)
    every = offline_embedder(name, threads=cores, model_cache=model_cache) if cores > 1 else one
    status.items_per_s_all_cores = embedstatus.measured_rate(every.embed, texts)
    status.eta_worker_s = round(status.not_embedded / max(status.items_per_s_one_core, 0.1), 2)
    status.eta_embed_s = round(status.not_embedded / max(status.items_per_s_all_cores, 0.1), 2)
    return status
