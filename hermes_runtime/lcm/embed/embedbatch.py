"""Embedding off the turn's critical path: batches taken from the queue, embedded, stored.

Why a module of its own: ingest only appends to ``embed_queue`` (O(1));
``embed_batch`` takes one batch, embeds it in calls small enough to let a
gateway's event loop run between them, and commits the vectors with the
removal of exactly those queue rows. The worker thread (``embedworker``),
``lcm embed`` (``embedjob``, every core) and ``embed_all`` (tests, benches)
all drain the queue through it; the SQL is ``embedqueue``'s.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from hermes_runtime.lcm.embed import embedqueue, embedstatus
from hermes_runtime.lcm.embed.embedders import MAX_EMBED_CHARS, Embedder
from hermes_runtime.lcm.embed.embedqueue import QueueEntry, enqueue_missing
from hermes_runtime.lcm.embed.embedstatus import queue_length
from hermes_runtime.lcm.embed.vectorindex import VectorIndex, encode_vector
from hermes_runtime.lcm.store.lcmstore import LcmStore


def _embedded(
    store: LcmStore, embedder: Embedder, batch: list[QueueEntry], chunked: bool = True
) -> list[tuple[str, int, str, np.ndarray]]:
    """(kind, item id, session id, vector) for each queued item that still exists."""
    texts = embedqueue.texts_for(store, batch)
    plain = [text for _, text in texts]
    vectors = _embed_in_chunks(embedder, plain) if chunked else _embed_whole(embedder, plain)
    return [
        (kind, item_id, session, vectors[i])
        for i, ((_, kind, item_id), (session, _text)) in enumerate(zip(batch, texts, strict=True))
        if session
    ]


def _embed_whole(embedder: Embedder, texts: list[str]) -> np.ndarray:
    """One call for the batch: an embedder with threads spreads it over the cores."""
    if not texts:
        return np.zeros((0, embedder.dim), dtype=np.float32)
    return embedder.embed(texts)


# Texts and characters per embedder call. The static model's Rust code keeps
# the GIL for a whole call, and its cost grows with the characters it reads, so
# a large call freezes the gateway's event loop for as long. A call reads at most
# EMBED_CHUNK texts and EMBED_CHUNK_CHARS characters, and the worker yields
# between calls (bench/lcm_loop_lag.py measures the loop's lag). e5 runs through
# ctypes, which releases the GIL, so its calls cost the loop nothing.
EMBED_CHUNK = 16
EMBED_CHUNK_CHARS = 4_000


def embed_chunks(texts: list[str], max_chars: int = EMBED_CHUNK_CHARS) -> list[list[str]]:
    """``texts`` in order, cut into calls of at most EMBED_CHUNK texts and ``max_chars``.

    Characters are counted as an embedder reads them (clipped to
    MAX_EMBED_CHARS); a text over ``max_chars`` makes a call of its own.
    """
    chunks: list[list[str]] = []
    current: list[str] = []
    size = 0
    for text in texts:
        length = min(len(text), MAX_EMBED_CHARS)
        if current and (len(current) == EMBED_CHUNK or size + length > max_chars):
            chunks.append(current)
            current, size = [], 0
        current.append(text)
        size += length
    if current:
        chunks.append(current)
    return chunks


def _embed_in_chunks(embedder: Embedder, texts: list[str]) -> np.ndarray:
    parts = []
    for chunk in embed_chunks(texts):
        parts.append(embedder.embed(chunk))
        time.sleep(0)  # let the event loop's thread take the GIL
    if not parts:
        return np.zeros((0, embedder.dim), dtype=np.float32)
    return np.concatenate(parts)


def embed_queued_in_memory(
    store: LcmStore, embedder: Embedder, index: VectorIndex, limit: int
) -> int:
    """Embed up to ``limit`` queued items into ``index`` only (nothing is written).

    For a search on a read-only database (``lcm search``): the agent's worker
    stores vectors; an operator's search must not, yet should see recent items.
    """
    batch = embedqueue.queued(store, limit) if limit > 0 else []
    if not batch:
        return 0
    found = _embedded(store, embedder, batch)
    if found:
        index.add_unsaved(
            embedder.model,
            [kind for kind, _, _, _ in found],
            [item for _, item, _, _ in found],
            [session for _, _, session, _ in found],
            np.stack([vector for _, _, _, vector in found]),
        )
    return len(batch)


@dataclass
class BatchTally:
    """One batch taken from the queue: items embedded, and items that had a vector already."""

    embedded: int = 0
    skipped: int = 0

    @property
    def taken(self) -> int:
        return self.embedded + self.skipped


def embed_batch(
    store: LcmStore,
    embedder: Embedder,
    batch_size: int = 256,
    vector_format: str = "int8",
    *,
    oldest_first: bool = True,
    chunked: bool = True,
) -> BatchTally:
    """Embed one batch from the queue and commit its vectors with the removal of its rows.

    Items that already have a vector of the model (a process beside this one
    embedded them) are only dequeued. ``chunked``: calls of a few texts, the
    GIL handed over between them (a gateway's worker); else one call for
    the batch (``lcm embed``, every core).
    """
    batch = embedqueue.queued(store, batch_size, oldest_first)
    if not batch:
        return BatchTally()
    started = time.perf_counter()
    done = embedqueue.with_vectors(store, embedder.model, batch)
    todo = [entry for entry in batch if (entry[1], entry[2]) not in done]
    rows = [
        (kind, item_id, embedder.model, embedder.dim, session, encode_vector(vector, vector_format))
        for kind, item_id, session, vector in _embedded(store, embedder, todo, chunked)
    ]
    embedqueue.store_vectors(store, rows, batch)
    embedstatus.record_batch(len(todo), time.perf_counter() - started, queue_length(store))
    return BatchTally(len(todo), len(batch) - len(todo))


def embed_all(
    store: LcmStore,
    embedder: Embedder,
    batch_size: int = 256,
    backfill: bool = False,
    vector_format: str = "int8",
) -> int:
    """Drain the queue; with ``backfill``, first queue items lacking this model's vector."""
    if backfill:
        enqueue_missing(store, embedder.model)
    total = 0
    while count := embed_batch(store, embedder, batch_size, vector_format).taken:
        total += count
    return total
