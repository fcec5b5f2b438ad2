"""Stored vectors and the in-memory index that searches them.

Vectors are stored as int8 with one float32 scale (``encode_vector``); the
index (``VectorIndex``) keeps an in-memory copy per model, refreshed
incrementally from the ``embeddings`` table, and scores a query exactly or,
past ``EXACT_ROWS``, after a coarse pass over one sign bit a dimension.
The embedders, the queue and its worker live beside it (``embedders``,
``embedqueue``, ``embedworker``).

Scores are cosine similarities less a hubness penalty (``HUB_WEIGHT`` x the
mean similarity of a row to its ``HUB_NEIGHBOURS`` nearest rows of a probe
sample): the CSLS correction of Conneau et al. (2018, "Word translation
without parallel data"). A small embedder puts some texts near everything
(gibberish notes, one-line questions, boilerplate tool output); those "hubs"
crowd the answers out of the top results, and the penalty pushes them back
(``bench/lcm_recall_variants.py`` compares; docs/lcm.md "Hubness").
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from hermes_runtime.lcm.store.lcmstore import LcmStore
from hermes_runtime.lcm.store.schema import fetch_all
from hermes_runtime.lcm.store.timewindow import IdWindow

REFRESH_PAGE = 20_000  # rows read at a time when the vector index catches up


def encode_vector(vector: np.ndarray, vector_format: str = "int8") -> bytes:
    """A vector as stored: int8 with one float32 scale (dim + 4 bytes), or float32.

    int8 stores a quarter of float32's bytes at no loss of recall
    (docs/benchmarks.md).
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

# Hubness: each row's mean similarity to its HUB_NEIGHBOURS nearest rows of a
# probe of PROBE_ROWS rows drawn (seeded) from the first ``span`` rows. The span
# is the largest power of two (from PROBE_MIN) not above the row count, capped
# at PROBE_SETTLED, so it depends on the count alone: an index that grew and
# one loaded at once hold the same probe and the same penalties. Below
# PROBE_MIN rows there is no penalty (too few rows to tell a hub).
PROBE_ROWS = 256
PROBE_SEED = 0
PROBE_MIN = 64
PROBE_SETTLED = 16_384
HUB_NEIGHBOURS = 10
HUB_WEIGHT = 0.25


def probe_span(count: int) -> int:
    """The rows the probe is drawn from: 0 (none yet), or a power of two times PROBE_MIN."""
    if count < PROBE_MIN:
        return 0
    return 1 << (min(count, PROBE_SETTLED).bit_length() - 1)  # both bounds powers of two


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
    rows loaded) for a coarse first pass: about a quarter of what float32
    arrays would hold, plus an eighth of that for the codes.
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
    hubs: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.float32))
    span: int = 0  # the probe's span (``probe_span``); 0: no probe yet
    probe: np.ndarray | None = None  # float32 rows (PROBE_ROWS x dim at most)

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
        # float32 copies of a block at a time: a whole page at once would need several
        # float32 temporaries of the page on top of the index while it loads
        for start in range(0, len(items), CODE_BLOCK):
            rows = slice(start, start + CODE_BLOCK)
            at = slice(self.count + start, self.count + min(start + CODE_BLOCK, len(items)))
            self.codes[at] = _sign_codes(quantized[rows], self.center / scales[rows, None])
        first_new, self.count = self.count, end
        self._update_hubs(first_new)

    def _floats(self, rows: np.ndarray | slice) -> np.ndarray:
        return self.matrix[rows].astype(np.float32) * self.scales[rows, None]

    def _update_hubs(self, first_new: int) -> None:
        """Penalties of the new rows, or of every row when the probe's span grew."""
        span = probe_span(self.count)
        if span == 0:
            return
        if span != self.span:
            # a seeded draw, not a stride: a stride falls in step with a transcript's
            # rhythm (one role, or tool output, every few rows), and the penalty then
            # finds fewer answers on the evaluation set
            draw = np.random.default_rng(PROBE_SEED).choice(span, min(span, PROBE_ROWS), False)
            positions = np.sort(draw)
            self.probe = np.ascontiguousarray(self._floats(positions).T)
            self.span, first_new = span, 0
        assert self.probe is not None
        neighbours = min(HUB_NEIGHBOURS, self.probe.shape[1])
        # whole blocks at fixed positions: a row's penalty is computed with the
        # same neighbours in the same block however the rows arrived
        for start in range(first_new - first_new % CODE_BLOCK, self.count, CODE_BLOCK):
            rows = slice(start, min(start + CODE_BLOCK, self.count))
            similar = self._floats(rows) @ self.probe
            nearest = np.partition(similar, -neighbours, axis=1)[:, -neighbours:]
            self.hubs[rows] = nearest.mean(axis=1)

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
        self.hubs = grown(self.hubs, (capacity,))

    def reserve(self, capacity: int) -> None:
        if capacity > len(self.items):
            self._grow(capacity)

    def nbytes(self) -> int:
        arrays = (self.kinds, self.items, self.sessions, self.scales, self.matrix, self.codes)
        return sum(int(a.nbytes) for a in arrays) + int(self.hubs.nbytes)

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
# and COARSE_FACTOR x limit), rescored exactly from the int8 rows: a Hamming
# pass over the codes and a tenth of the rows instead of converting them all.
EXACT_ROWS = 100_000
EXACT_BLOCK = 16_384
COARSE_FACTOR = 8
COARSE_MIN = 4_096
COARSE_SHARE = 0.1


@dataclass
class VectorIndex:
    """Cosine search over an in-memory int8 copy of the embeddings table.

    A SQL scan calls a distance function per row on top of SQLite's row overhead;
    numpy over arrays in memory is far faster, and the copy is refreshed
    incrementally (rows with a larger id than the last seen), so a query never
    reloads history. Up to ``EXACT_ROWS`` vectors are all scored exactly; past that
    a pass over one sign bit a dimension picks candidates that are then rescored
    exactly.
    """

    exact_rows: int = EXACT_ROWS
    hub_weight: float = HUB_WEIGHT  # 0: plain cosine similarity
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
        window: IdWindow | None = None,
    ) -> list[tuple[str, int, float]]:
        """(kind, item id, score), best first: cosine less the row's hubness penalty.

        ``window``: only rows of that time window, masked before the candidates are
        picked (as the session is), so the top rows are the window's best.
        """
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
            if window is not None:
                inside = window.mask(vectors.kinds[:n], vectors.items[:n])
                allowed = inside if allowed is None else allowed & inside
            rows = self._candidates(vectors, query, allowed, limit)
            scores = vectors.exact_scores(rows, query) - self.hub_weight * vectors.hubs[rows]
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
