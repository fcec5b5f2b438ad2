"""How far embedding has come: the backlog, the rate, and how long until all is searchable.

Prometheus figures (the agent's ``/metrics`` serves the default registry):
``lcm_embed_queue`` (items queued for embedding), ``lcm_embedded_items_total``
and ``lcm_embed_items_per_second`` (the rate while embedding, over the last
minute of work). ``embedding_status`` answers ``lcm doctor``: items lacking a
vector of the model, and the time to embed them at a rate measured on a
sample of them, on this machine, now.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import asdict, dataclass

from prometheus_client import Counter, Gauge

from hermes_runtime.lcm.store.lcmstore import LcmStore
from hermes_runtime.lcm.store.schema import fetch_all, fetch_value

QUEUE = Gauge("lcm_embed_queue", "Items queued for embedding (no vector yet)")
EMBEDDED = Counter("lcm_embedded_items_total", "Items given a vector by the embedding worker")
RATE = Gauge(
    "lcm_embed_items_per_second",
    "Items embedded a second while embedding, over the last minute of work",
)
RATE_WINDOW_S = 60.0
SAMPLE_ITEMS = 48  # items embedded (in memory) to measure the rate for lcm doctor

_recent: deque[tuple[float, int, float]] = deque()
_recent_lock = threading.Lock()


def record_batch(embedded: int, busy_seconds: float, queue_left: int | None = None) -> None:
    """After a batch: count it, update the rate over the last minute, set the queue gauge."""
    EMBEDDED.inc(embedded)
    now = time.monotonic()
    with _recent_lock:
        _recent.append((now, embedded, busy_seconds))
        while _recent and _recent[0][0] < now - RATE_WINDOW_S:
            _recent.popleft()
        items = sum(n for _, n, _ in _recent)
        busy = sum(s for _, _, s in _recent)
    RATE.set(round(items / busy, 2) if busy > 0 else 0.0)
    if queue_left is not None:
        QUEUE.set(queue_left)


def recent_rate() -> float | None:
    """Items a second this process's worker embedded over its last minute of work (None: none).

    No sample is embedded to measure it (``measured_rate`` does, for ``lcm doctor``):
    the agent's tools ask it during a turn.
    """
    with _recent_lock:
        items = sum(n for _, n, _ in _recent)
        busy = sum(s for _, _, s in _recent)
    return round(items / busy, 2) if busy > 0 and items else None


def queue_length(store: LcmStore) -> int:
    return int(fetch_value(store.conn, "SELECT count(*) FROM embed_queue") or 0)


def embedding_backlog(store: LcmStore, model: str) -> int:
    """Messages and summaries without a vector of ``model`` (not only the queued ones).

    After a model change nothing may be queued yet (a worker queues at start)
    while no item has the new model's vector: this counts those too. Message
    ids are dense (messages are never deleted), so ``max(id)`` counts them.
    """
    counts = store.counts()
    vectors = int(
        fetch_value(store.conn, "SELECT count(*) FROM embeddings WHERE model = ?", (model,)) or 0
    )
    return max(0, counts["messages"] + counts["summaries"] - vectors)


@dataclass
class EmbeddingStatus:
    """``lcm doctor``'s embedding section: what is left and how long it takes."""

    model: str
    not_embedded: int
    queued: int
    items_per_s_one_core: float | None = None
    items_per_s_all_cores: float | None = None
    eta_worker_s: float | None = None  # the agent's worker: one core
    eta_embed_s: float | None = None  # `lcm embed`: every core

    def as_dict(self) -> dict[str, object]:
        return asdict(self)

    def text(self, cores: int) -> str:
        if self.not_embedded == 0:
            return f"embeddings: every item has a vector of {self.model}"
        line = f"embeddings: {self.not_embedded} items not embedded yet ({self.model})"
        if self.eta_worker_s is not None and self.eta_embed_s is not None:
            line += (
                f"; searchable in about {_duration(self.eta_worker_s)} by the agent's worker "
                f"(1 core, {self.items_per_s_one_core} items/s measured now), "
                f"{_duration(self.eta_embed_s)} with `hermes-runtime lcm embed` "
                f"({cores} cores, {self.items_per_s_all_cores} items/s)"
            )
        return line


def _duration(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5_400:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3_600:.1f} h"


def sample_texts(store: LcmStore, count: int = SAMPLE_ITEMS) -> list[str]:
    """Texts of queued items spread over the queue (else of the newest messages)."""
    rows = fetch_all(
        store.conn,
        "SELECT coalesce(m.content, m.content_json, s.content, '') FROM "
        "(SELECT kind, item_id FROM embed_queue ORDER BY random() LIMIT ?) q "
        "LEFT JOIN messages m ON q.kind = 'message' AND m.id = q.item_id "
        "LEFT JOIN summaries s ON q.kind = 'summary' AND s.id = q.item_id",
        (count,),
    )
    if not rows:
        rows = fetch_all(
            store.conn,
            "SELECT coalesce(content, content_json, '') FROM messages ORDER BY id DESC LIMIT ?",
            (count,),
        )
    return [str(r[0] or "") for r in rows]


def measured_rate(embed: Callable[[list[str]], object], texts: list[str]) -> float:
    """Items a second ``embed`` takes on ``texts`` (the model's load not counted)."""
    embed(texts[:1])  # a model loads on first use: not part of the rate
    started = time.perf_counter()
    embed(texts)
    return round(len(texts) / max(time.perf_counter() - started, 1e-6), 1)
