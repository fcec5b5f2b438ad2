"""Compaction: always converges, never splits a tool call from its result, loses nothing."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from fakes.fixtures import FakeLLM
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from support.lcm_conversations import SMALL_POLICY as SMALL
from support.lcm_conversations import blob, reconstruct, simple_conversation, tool_turn

from hermes_runtime.lcm.compact.assembly import count_tokens, validation_errors
from hermes_runtime.lcm.compact.policy import CompactionPolicy
from hermes_runtime.lcm.compact.summarize import (
    LEVEL_DETAILED,
    LEVEL_DETERMINISTIC,
    OpenAISummarizer,
    deterministic_summary,
)
from hermes_runtime.lcm.config import LcmConfig
from hermes_runtime.lcm.engine.lcmengine import LcmEngine
from hermes_runtime.lcm.records import SUMMARY_HEADER_TOKENS
from hermes_runtime.lcm.store import dag


def make_engine(tmp_path: Path, policy: CompactionPolicy = SMALL, **kw: Any) -> LcmEngine:
    config = LcmConfig.for_home(tmp_path, {"embeddings": "off", "externalize_chars": 2_000})
    config = LcmConfig(**{**config.__dict__, "policy": policy})
    return LcmEngine(config, **kw)


def test_context_fits_budget_and_stays_lossless(engine: LcmEngine) -> None:
    messages = simple_conversation(40)
    engine.ingest("s", messages)
    context, report = engine.compactions.fitted_context("s", 1_500)
    assert report.summaries_created
    assert count_tokens(context) <= 1_500
    assert validation_errors(context) == []
    assert reconstruct(engine.store, context) == messages


def test_a_compress_reads_the_live_context_once(
    engine: LcmEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The assembled context is the one the compaction left, not read back twice more.

    Reading the context items is ~1 ms a call in the engine loop at a 32k context; three
    reads a compress were a fifth of the loop (docs/benchmarks.md).
    """
    messages = simple_conversation(40)
    engine.ingest("s", messages)
    reads: list[str] = []
    real = dag.context_items
    monkeypatch.setattr(dag, "context_items", lambda store, s: reads.append(s) or real(store, s))
    context, report = engine.compactions.fitted_context("s", 1_500)
    assert report.summaries_created
    assert reads == ["s"]
    assert context == engine.context("s")  # what is stored, read afresh
    assert reconstruct(engine.store, context) == messages


def test_summaries_pile_up_into_deeper_levels(tmp_path: Path) -> None:
    lcm = make_engine(tmp_path)
    messages = simple_conversation(60)
    for start in range(0, len(messages), 6):
        lcm.ingest("s", messages[start : start + 6])
        lcm.compactions.compact("s", 900)
    depths = [r[0] for r in lcm.store.conn.execute("SELECT depth FROM summaries")]
    assert max(depths) >= 1, depths
    context = lcm.context("s")
    assert reconstruct(lcm.store, context) == messages
    lcm.close()


def test_fresh_tail_is_kept_verbatim(engine: LcmEngine) -> None:
    messages = simple_conversation(30)
    engine.ingest("s", messages)
    context, _ = engine.compactions.fitted_context("s", 3_000)
    tail = engine.config.policy.fresh_tail_messages
    assert context[-tail:] == messages[-tail:]


def test_tool_group_is_never_split(tmp_path: Path) -> None:
    lcm = make_engine(tmp_path, CompactionPolicy(fresh_tail_messages=3, leaf_chunk_tokens=50))
    messages: list[dict[str, Any]] = []
    for i in range(12):
        messages += tool_turn(i, f"q{i} " + "w " * 30, [f"r{i}a " * 20, f"r{i}b " * 20])
    lcm.ingest("s", messages)
    for budget in (3_000, 1_500, 700, 300):
        context, _ = lcm.compactions.fitted_context("s", budget)
        assert validation_errors(context) == [], budget
        assert count_tokens(context) <= budget
    lcm.close()


def test_system_messages_stay_pinned(engine: LcmEngine) -> None:
    system = {"role": "system", "content": "You are a careful agent."}
    engine.ingest("s", [system, *simple_conversation(30)])
    context, _ = engine.compactions.fitted_context("s", 800)
    assert context[0] == system


def test_llm_summary_is_used_when_it_fits(tmp_path: Path, fake_llm: FakeLLM) -> None:
    summarizer = OpenAISummarizer(fake_llm.base_url, "fake-model")
    lcm = make_engine(tmp_path, summarizer=summarizer)
    lcm.ingest("s", simple_conversation(20))
    report = lcm.compactions.compact("s", 800)
    assert LEVEL_DETAILED in report.levels
    assert report.fits
    request = fake_llm.requests()[0]
    assert "summar" in request["messages"][0]["content"].lower()
    lcm.close()


def _converges_with_mode(tmp_path: Path, fake_llm: FakeLLM, mode: str) -> None:
    fake_llm.set_mode(mode, hang_seconds=3)
    lcm = make_engine(tmp_path, summarizer=OpenAISummarizer(fake_llm.base_url, "m"))
    messages = simple_conversation(30)
    lcm.ingest("s", messages)
    report = lcm.compactions.compact("s", 600)
    assert report.fits, report
    assert set(report.levels) == {LEVEL_DETERMINISTIC}
    assert report.errors
    assert reconstruct(lcm.store, lcm.context("s")) == messages
    lcm.close()


def test_converges_when_summarizer_fails(tmp_path: Path, fake_llm: FakeLLM) -> None:
    _converges_with_mode(tmp_path, fake_llm, "fail")


def test_converges_when_summarizer_returns_garbage(tmp_path: Path, fake_llm: FakeLLM) -> None:
    _converges_with_mode(tmp_path, fake_llm, "garbage")


def test_hanging_summarizer_is_bounded_by_the_deadline(tmp_path: Path, fake_llm: FakeLLM) -> None:
    _converges_with_mode(tmp_path, fake_llm, "hang")
    requests = fake_llm.requests()
    # the per-call timeout (0.5 s) and deadline (5 s) cap the calls made
    assert 1 <= len(requests) <= int(SMALL.deadline_seconds / SMALL.call_timeout_seconds) + 1


def test_unreachable_summarizer_converges(tmp_path: Path) -> None:
    lcm = make_engine(tmp_path, summarizer=OpenAISummarizer("http://127.0.0.1:9/v1", "m"))
    lcm.ingest("s", simple_conversation(20))
    report = lcm.compactions.compact("s", 600)
    assert report.fits and report.errors
    lcm.close()


def test_deterministic_summary_respects_target() -> None:
    text = "abcdefghij" * 1_000
    summary = deterministic_summary(text, 50)
    assert len(summary) <= 200
    assert summary.startswith("abcdefghij") and "[...]" in summary


def test_externalized_outputs_in_context_are_stubs(engine: LcmEngine) -> None:
    messages = tool_turn(0, "fetch the page", ["<html>" + "x" * 10_000 + "</html>", blob(4_000)])
    engine.ingest("s", messages)
    context = engine.context("s")
    assert all(len(str(m.get("content"))) < 2_000 for m in context)
    assert reconstruct(engine.store, context) == messages


# -- property test over random conversations -------------------------------

texts = st.text(alphabet=st.characters(exclude_categories=["Cs"]), min_size=0, max_size=300)
results = st.one_of(
    texts, st.integers(2_100, 6_000).map(lambda n: "r" * n), st.integers(1_100, 3_000).map(blob)
)
turns = st.lists(st.tuples(texts, st.lists(results, max_size=3), texts), min_size=1, max_size=25)


# What is left of the history once everything but an open tool group is squeezed:
# one minimal summary (header + a few words) and its message overhead.
MINIMAL_REST_TOKENS = SUMMARY_HEADER_TOKENS + 40


def open_group_tokens(ingested: list[dict[str, Any]], context: list[dict[str, Any]]) -> int:
    """Tokens, as assembled, of a trailing tool group whose results are still arriving.

    Such a group is never folded (its later results would be orphaned), so the
    budget can only bind once it is complete; in Hermes compaction never runs
    mid-group, but a batch boundary here can fall inside one.
    """
    for index in range(len(ingested) - 1, -1, -1):
        message = ingested[index]
        if message["role"] == "tool":
            continue
        calls = message.get("tool_calls") or [] if message["role"] == "assistant" else []
        wanted = {call["id"] for call in calls}
        answered = {m.get("tool_call_id") for m in ingested[index + 1 :] if m["role"] == "tool"}
        if not wanted or wanted <= answered:
            return 0
        for position, item in enumerate(context):
            ids = {call.get("id") for call in item.get("tool_calls") or []}
            if item["role"] == "assistant" and ids == wanted:
                return count_tokens(context[position:])
        return 0
    return 0


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    conversation=turns,
    budget=st.integers(150, 4_000),
    tail=st.integers(0, 6),
    chunk=st.integers(100, 2_000),
    fanout=st.integers(2, 4),
    batch=st.integers(1, 9),
)
@example(  # found in CI: an open tool group of 394 tokens against budgets of 388 and 391
    conversation=[
        ("", [], ""),
        ("", [], ""),
        ("", ["", "", "r" * 2100], ""),
        ("", ["", "", "r" * 2100], ""),
        ("", ["", ""], ""),
    ],
    budget=391,
    tail=0,
    chunk=100,
    fanout=2,
    batch=1,
)
def test_random_conversations_fit_stay_valid_and_lossless(
    tmp_path_factory: Any,
    conversation: list[tuple[str, list[str], str]],
    budget: int,
    tail: int,
    chunk: int,
    fanout: int,
    batch: int,
) -> None:
    policy = CompactionPolicy(
        fresh_tail_messages=tail,
        leaf_chunk_tokens=chunk,
        leaf_target_tokens=60,
        condense_fanout=fanout,
        condense_target_tokens=90,
    )
    lcm = make_engine(tmp_path_factory.mktemp("prop"), policy)
    messages: list[dict[str, Any]] = []
    for index, (question, outputs, answer) in enumerate(conversation):
        messages += tool_turn(index, question, outputs, answer or "ok")
    for start in range(0, len(messages), batch):
        lcm.ingest("s", messages[start : start + batch])
        context, report = lcm.compactions.fitted_context("s", budget)
        assert validation_errors(context) == []
        protected = open_group_tokens(messages[: start + batch], context)
        if protected + MINIMAL_REST_TOKENS <= budget:
            assert count_tokens(context) <= budget, report
        else:  # only the still-open tool group may overflow; the rest is squeezed to a stub
            assert count_tokens(context) - protected <= MINIMAL_REST_TOKENS, report
    assert reconstruct(lcm.store, lcm.context("s")) == messages
    lcm.close()


def test_repair_only_touches_broken_histories() -> None:
    from hermes_runtime.lcm.compact.assembly import repair

    call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    good: list[dict[str, Any]] = [
        {"role": "user", "content": "q"},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c1", "content": "r"},
    ]
    assert repair(good) is good
    orphan: list[dict[str, Any]] = [
        {"role": "tool", "tool_call_id": "zz", "content": "lost"},
        *good,
    ]
    assert repair(orphan) == good
    unanswered: list[dict[str, Any]] = [*good[:2], {"role": "user", "content": "next"}]
    fixed = repair(unanswered)
    assert validation_errors(fixed) == []
    assert "unanswered tool calls" in fixed[1]["content"]
