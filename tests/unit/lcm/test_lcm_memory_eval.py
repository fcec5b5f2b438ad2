"""The LongMemEval-shaped evaluation (bench/lcm_memory_eval.py) measures what it says.

Its figures are reported by its command (docs/benchmarks.md); here: every question's evidence
is planted where the set says, the scorer finds evidence that is there (asked verbatim, it
ranks first) and counts what is missing, and the set keeps LongMemEval's shape.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import pytest

from hermes_runtime.lcm.config import LcmConfig
from hermes_runtime.lcm.embed.embedbatch import embed_all
from hermes_runtime.lcm.embed.embedders import StaticModelEmbedder
from hermes_runtime.lcm.engine.lcmengine import LcmEngine

BENCH = Path(__file__).parents[3] / "bench"


def load(name: str, monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    """A bench module as its command runs it: the bench folder importable."""
    monkeypatch.syspath_prepend(str(BENCH))
    spec = importlib.util.spec_from_file_location(name, BENCH / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def built(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    evaluation = load("lcm_memory_eval", monkeypatch)
    engine = LcmEngine(LcmConfig.for_home(tmp_path, {"embeddings": "off"}))
    try:
        cases = evaluation.build(engine, turns=4)
        embedder = StaticModelEmbedder()
        embed_all(engine.store, embedder)
        yield evaluation, engine, embedder, cases
    finally:
        engine.close()


def message_text(engine: LcmEngine, ref: str) -> str:
    row = engine.store.conn.execute(
        "SELECT content, created_at FROM messages WHERE id = ?", (int(ref[4:]),)
    ).fetchone()
    return str(row[0])


def test_every_piece_of_evidence_is_stored_where_the_set_plants_it(built) -> None:
    evaluation, engine, _, cases = built
    questions = evaluation.QUESTION_TYPES
    for kind, index, question, accepted in cases:
        evidence = questions[kind][index][1]
        assert question == questions[kind][index][0]
        assert len(accepted) == len(evidence)
        for refs, (_, _, text) in zip(accepted, evidence, strict=True):
            messages = [r for r in refs if r.startswith("msg_")]
            assert len(messages) == 1, refs
            assert message_text(engine, messages[0]) == text


def test_the_scorer_finds_evidence_asked_verbatim_and_counts_what_is_missing(built) -> None:
    evaluation, engine, embedder, cases = built
    for kind, index, _, accepted in cases:
        if not accepted:
            continue
        text = evaluation.QUESTION_TYPES[kind][index][1][0][2]
        found = evaluation.ranks(engine, embedder, (kind, index, text, accepted[:1]), "fts")
        assert found == [1], (kind, text, found)
    assert evaluation.case_scores("multi-session", [1, None, 3]) == {
        "recall@5": 1.0, "all@5": 0.0, "recall@10": 1.0, "all@10": 0.0,
    }  # fmt: skip
    assert evaluation.case_scores("knowledge-update", [2, 4])["newer_wins@5"] == 0.0
    assert evaluation.case_scores("knowledge-update", [None, 4])["newer_wins@5"] == 1.0


def test_the_set_has_longmemevals_question_types_with_two_halves(monkeypatch) -> None:
    questions = load("lcm_memory_eval_set", monkeypatch).QUESTION_TYPES
    assert set(questions) == {
        "single-session-user", "single-session-assistant", "multi-session",
        "temporal-reasoning", "knowledge-update", "abstention",
    }  # fmt: skip
    for kind, items in questions.items():
        assert len(items) >= 10 and len(items) % 2 == 0, kind
        sizes = {len(evidence) for _, evidence in items}
        wanted = {"multi-session": {3}, "temporal-reasoning": {2}, "knowledge-update": {2}}
        assert sizes == wanted.get(kind, {0} if kind == "abstention" else {1}), kind
    for _, (older, newer) in questions["knowledge-update"]:
        assert older[0] < newer[0]  # the update comes in a later session
