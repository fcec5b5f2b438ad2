"""Embeddings for messages and summaries, computed off the turn's critical path.

Ingest only appends to ``embed_queue`` (O(1)); ``embed_pending`` drains it in
batches, and ``EmbeddingWorker`` runs that on a background thread. Vectors
carry their model name and dimension, and every query filters on the model,
so changing the model never mixes vector spaces.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Protocol

import httpx
import numpy as np

from hermes_runtime.lcm.schema import fetch_all, fetch_one
from hermes_runtime.lcm.store import LcmStore

MAX_EMBED_CHARS = 2_000


class Embedder(Protocol):
    model: str
    dim: int

    def embed(self, texts: list[str]) -> np.ndarray: ...


def normalize(matrix: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    return (matrix / norms).astype(np.float32)


@dataclass
class StaticModelEmbedder:
    """The offline default: ``tokenlearn-static-model`` (64-d static embeddings, no network)."""

    model: str = "tokenlearn-static-model-0.1.1"
    dim: int = 64

    def embed(self, texts: list[str]) -> np.ndarray:
        from static_model import get_embeddings

        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        vectors = get_embeddings([t[:MAX_EMBED_CHARS] or " " for t in texts])
        return normalize(np.asarray(vectors, dtype=np.float32))


@dataclass
class OpenAIEmbedder:
    """An OpenAI-compatible ``/embeddings`` endpoint."""

    base_url: str
    model: str
    dim: int
    api_key: str = ""
    timeout: float = 30.0

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


def _texts_for(store: LcmStore, batch: list[tuple[int, str, int]]) -> list[tuple[str, str]]:
    """(session_id, text) per queued item; the stub stands in for externalized content."""
    result = []
    for _, kind, item_id in batch:
        table = "messages" if kind == "message" else "summaries"
        column = "coalesce(content, content_json, '')" if kind == "message" else "content"
        row = fetch_one(
            store.conn, f"SELECT session_id, {column} FROM {table} WHERE id = ?", (item_id,)
        )
        result.append((row[0], row[1]) if row else ("", ""))
    return result


def embed_pending(store: LcmStore, embedder: Embedder, batch_size: int = 256) -> int:
    """Embed one batch from the queue; returns how many items were embedded."""
    batch = [
        (int(r[0]), str(r[1]), int(r[2]))
        for r in store.conn.execute(
            "SELECT id, kind, item_id FROM embed_queue ORDER BY id LIMIT ?", (batch_size,)
        )
    ]
    if not batch:
        return 0
    texts = _texts_for(store, batch)
    vectors = embedder.embed([text for _, text in texts])
    rows = [
        (kind, item_id, embedder.model, embedder.dim, session, vectors[i].tobytes())
        for i, ((_, kind, item_id), (session, _text)) in enumerate(zip(batch, texts, strict=True))
        if session
    ]
    with store.writing() as conn:
        conn.executemany(
            "INSERT OR IGNORE INTO embeddings(kind, item_id, model, dim, session_id, vector) "
            "VALUES (?, ?, ?, ?, ?, ?)",
            rows,
        )
        conn.execute("DELETE FROM embed_queue WHERE id <= ?", (batch[-1][0],))
    return len(batch)


def embed_all(store: LcmStore, embedder: Embedder, batch_size: int = 256) -> int:
    total = 0
    while count := embed_pending(store, embedder, batch_size):
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


@dataclass
class _ModelVectors:
    """Every vector of one model, in memory, appended to as new rows arrive."""

    dim: int
    last_id: int = 0
    kinds: list[np.ndarray] = field(default_factory=list)
    items: list[np.ndarray] = field(default_factory=list)
    sessions: list[np.ndarray] = field(default_factory=list)
    chunks: list[np.ndarray] = field(default_factory=list)

    def compact(self) -> None:
        if len(self.chunks) > 1:
            self.kinds = [np.concatenate(self.kinds)]
            self.items = [np.concatenate(self.items)]
            self.sessions = [np.concatenate(self.sessions)]
            self.chunks = [np.concatenate(self.chunks)]


@dataclass
class VectorIndex:
    """Brute-force cosine search over an in-memory copy of the embeddings table.

    A SQL scan calling a distance function per row costs ~0.5 us a row plus
    SQLite's row overhead; one numpy matrix product over all vectors is an
    order of magnitude faster, and the copy is refreshed incrementally (rows
    with a larger id than the last seen), so a query never reloads history.
    64-d float32 vectors cost 256 bytes each: 25 MB at 100k items.
    """

    _models: dict[str, _ModelVectors] = field(default_factory=dict)
    _session_codes: dict[str, int] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def _refresh(self, store: LcmStore, model: str, dim: int) -> _ModelVectors:
        vectors = self._models.setdefault(model, _ModelVectors(dim))
        # a rowid range (O(new rows)); filtering on model in SQL would make
        # SQLite walk the (model, kind, item_id) index: O(all rows) per query
        rows = fetch_all(
            store.conn,
            "SELECT id, kind, item_id, session_id, vector, model, dim FROM embeddings "
            "WHERE id > ? ORDER BY id",
            (vectors.last_id,),
        )
        if rows:
            vectors.last_id = int(rows[-1][0])
            rows = [
                r for r in rows if r[5] == model and r[6] == dim and any(bytes(r[4]))
            ]  # other models' vectors never mix in; a zero vector matches nothing
        if rows:
            codes = self._session_codes
            vectors.kinds.append(np.array([r[1] == "summary" for r in rows], dtype=np.bool_))
            vectors.items.append(np.array([r[2] for r in rows], dtype=np.int64))
            vectors.sessions.append(
                np.array([codes.setdefault(str(r[3]), len(codes)) for r in rows], dtype=np.int32)
            )
            vectors.chunks.append(
                np.frombuffer(b"".join(bytes(r[4]) for r in rows), dtype=np.float32).reshape(
                    len(rows), dim
                )
            )
            vectors.compact()
        return vectors

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
            if not vectors.chunks:
                return []
            matrix, items = vectors.chunks[0], vectors.items[0]
            kinds, sessions = vectors.kinds[0], vectors.sessions[0]
            scores = matrix @ query.astype(np.float32)
            if session_id is not None:
                code = self._session_codes.get(session_id)
                if code is None:
                    return []
                scores = np.where(sessions == code, scores, -np.inf)
            k = min(limit, len(scores))
            top = np.argpartition(-scores, k - 1)[:k]
            top = top[np.argsort(-scores[top])]
            return [
                ("summary" if kinds[i] else "message", int(items[i]), float(scores[i]))
                for i in top
                if np.isfinite(scores[i])
            ]
