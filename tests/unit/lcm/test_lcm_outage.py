"""A compaction while the summary model fails is deferred (``outage.py``), not folded into
the deterministic extract: nothing is written, nothing is lost, and the next compaction,
once the model answers, writes LLM summaries.

Real SQLite, a real ``OpenAISummarizer`` against the fake provider in its failure modes.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from fakes.fixtures import FakeLLM
from support.lcm_conversations import reconstruct, simple_conversation

from hermes_runtime.lcm.compact.outage import SummaryDeferred, may_defer
from hermes_runtime.lcm.compact.summarize import LEVEL_DETERMINISTIC, OpenAISummarizer
from hermes_runtime.lcm.config import LcmConfig
from hermes_runtime.lcm.engine.lcmengine import LcmEngine


def make_engine(tmp_path: Path, fake_llm: FakeLLM) -> LcmEngine:
    config = LcmConfig.for_home(tmp_path, {"embeddings": "off", "externalize_chars": 2_000})
    return LcmEngine(config, summarizer=OpenAISummarizer(fake_llm.base_url, "fake-model"))


def summaries(engine: LcmEngine) -> int:
    return int(engine.store.counts()["summaries"])


@pytest.mark.parametrize("mode", ["fail", "429", "refuse", "malformed"])
def test_a_compaction_defers_while_the_summary_model_fails(
    tmp_path: Path, fake_llm: FakeLLM, mode: str
) -> None:
    engine = make_engine(tmp_path, fake_llm)
    messages = simple_conversation(40)
    engine.ingest("s", messages)
    fake_llm.set_mode(mode)
    with pytest.raises(SummaryDeferred, match="summary model unavailable"):
        engine.compactions.fitted_context("s", 600, defer=True)
    assert summaries(engine) == 0  # no extract, no half-written fold
    assert reconstruct(engine.store, engine.context("s")) == messages

    fake_llm.set_mode("normal")  # the model is back: the next compaction summarizes
    _, report = engine.compactions.fitted_context("s", 600, defer=True)
    assert report.summaries_created
    assert any(level != LEVEL_DETERMINISTIC for level in report.levels), report.levels
    assert reconstruct(engine.store, engine.context("s")) == messages
    engine.close()


def test_without_defer_the_extract_keeps_the_conversation_going(
    tmp_path: Path, fake_llm: FakeLLM
) -> None:
    """A context at the model's window cannot wait: the extract is written, as before."""
    engine = make_engine(tmp_path, fake_llm)
    engine.ingest("s", simple_conversation(40))
    fake_llm.set_mode("fail")
    _, report = engine.compactions.fitted_context("s", 600)
    assert set(report.levels) == {LEVEL_DETERMINISTIC} and report.errors
    engine.close()


def test_only_a_context_within_the_window_may_wait() -> None:
    turn = [{"role": "user", "content": "hi"}]
    assert may_defer(turn, 150_000, 200_000)
    assert not may_defer(turn, 200_000, 200_000)  # at the window: compact now
    assert not may_defer(turn, 150_000, 0)  # window unknown
    assert not may_defer([], 150_000, 200_000)
