"""Near-copies wait behind distinct results (search/diversity.py), in hybrid search too."""

from __future__ import annotations

from dataclasses import replace

from hermes_runtime.lcm.engine.lcmengine import LcmEngine
from hermes_runtime.lcm.search.diversity import diversified, overlap, word_set
from hermes_runtime.lcm.search.hybrid import DEFAULT_FUSION, hybrid_search

FILLERS = ["today", "again", "this morning", "at noon", "as usual", "all week"]
REPEATED = "The neighbour's dog barks at the mailman {}."
DISTINCT = (
    "Biscuit, our dog, has his vaccination at the vet on Friday; we should leave early because "
    "the clinic is across town and parking there is always difficult on weekdays."
)


def test_a_near_copy_of_a_chosen_result_is_deferred() -> None:
    texts = {
        "a": "the dog barks at the mailman today",
        "b": "the dog barks at the mailman again",
        "c": "the vet sees our dog on friday",
    }
    assert overlap(word_set(texts["a"]), word_set(texts["b"])) > 0.5
    assert diversified(["a", "b", "c"], texts.get, 0.5, 2) == ["a", "c", "b"]
    assert diversified(["a", "b", "c"], texts.get, 1.0, 2) == ["a", "b", "c"]  # off
    assert diversified(["a", "x", "b"], texts.get, 0.5, 2) == ["a", "x", "b"]  # unknown: kept
    read: list[str] = []
    diversified(["c", "a", "b"], lambda k: read.append(k) or texts.get(k), 0.5, 1)
    assert read == ["c"]  # words only for the candidates the walk reaches


def test_hybrid_search_lets_a_distinct_answer_into_the_top(engine: LcmEngine) -> None:
    messages = [{"role": "user", "content": REPEATED.format(f)} for f in FILLERS]
    messages.append({"role": "user", "content": DISTINCT})
    engine.ingest("s1", messages)
    distinct_id = engine.store.conn.execute(
        "SELECT id FROM messages WHERE content = ?", (DISTINCT,)
    ).fetchone()[0]

    def top(overlap_limit: float) -> list[str]:
        fusion = replace(DEFAULT_FUSION, near_copy_overlap=overlap_limit)
        found = hybrid_search(engine.store, None, "dog", None, 3, mode="fts", fusion=fusion)
        return [hit.id for hit in found]

    assert f"msg_{distinct_id}" not in top(1.0)  # the short near-copies rank first
    assert f"msg_{distinct_id}" in top(DEFAULT_FUSION.near_copy_overlap)
    assert len(top(DEFAULT_FUSION.near_copy_overlap)) == 3  # deferred ones still fill
