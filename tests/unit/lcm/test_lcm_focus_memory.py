"""``compress(focus_topic=..., memory_context=...)``: Hermes' manual focus and memory handoff.

``/compress <topic>`` must steer the summaries of that compaction (the LLM
prompt, and the deterministic fallback keeps the topic's lines first); the
memory provider's context must stay out of what is stored and summarized,
yet never drop out of the context.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fakes.fixtures import FakeLLM

from hermes_runtime.lcm.compact.summarize import deterministic_summary, make_summarizer
from hermes_runtime.lcm.config import LcmConfig
from hermes_runtime.lcm.engine.lcmengine import LcmEngine
from hermes_runtime.lcm.host.hermes_plugin import LcmContextEngine
from hermes_runtime.lcm.host.plugin_host import MEMORY_CONTEXT_MARKER
from hermes_runtime.lcm.records import estimate_tokens
from hermes_runtime.lcm.store.schema import fetch_all

SYSTEM = {"role": "system", "content": "You are Hermes."}
FOCUS_LINE = "[msg_7 user] The database migration failed with error E1234 on table invoices."


def long_text() -> str:
    filler = [f"[msg_{i} assistant] Chatter about lunch plans number {i}." for i in range(60)]
    return "\n".join([*filler[:30], FOCUS_LINE, *filler[30:]])


def test_deterministic_summary_keeps_focus_lines_first_and_fits() -> None:
    text = long_text()
    plain = deterministic_summary(text, 60)
    assert FOCUS_LINE not in plain  # the middle of the text is what a plain extract drops
    focused = deterministic_summary(text, 60, focus="database migration")
    assert focused.startswith(FOCUS_LINE)
    assert estimate_tokens(focused) <= 60
    assert "lunch plans number 0" in focused  # the rest still fills the budget


def test_deterministic_focus_without_a_match_is_the_plain_extract() -> None:
    text = long_text()
    assert deterministic_summary(text, 60, "kubernetes") == deterministic_summary(text, 60)


def conversation(turns: int) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = []
    for i in range(turns):
        topic = "The database migration failed with error E1234." if i == 3 else "Lunch chatter."
        messages += [
            {"role": "user", "content": f"turn {i}: {topic} " + "words " * 80},
            {"role": "assistant", "content": f"noted {i} " + "reply " * 80},
        ]
    return messages


def test_llm_summarizer_prompt_carries_the_focus_topic(tmp_path: Path, fake_llm: FakeLLM) -> None:
    config = LcmConfig.for_home(tmp_path, {"embeddings": "off"})
    engine = LcmEngine(config, summarizer=make_summarizer(fake_llm.base_url, "fake-model"))
    try:
        engine.ingest("s", conversation(8))
        report = engine.compactions.compact("s", 10_000, force=True, focus="database migration")
    finally:
        engine.close()
    assert report.summaries_created
    prompts = [str(r["messages"][0]["content"]) for r in fake_llm.requests()]
    assert prompts and all("FOCUS TOPIC: 'database migration'" in p for p in prompts)


def hermes_engine(tmp_path: Path) -> LcmContextEngine:
    engine = LcmContextEngine(LcmConfig.for_home(tmp_path, {"embeddings": "off"}))
    engine.update_model("fake-model", 20_000)  # no endpoint: deterministic summaries
    engine.on_session_start("session-1")
    return engine


def test_manual_compress_with_focus_keeps_the_topic_in_the_summary(tmp_path: Path) -> None:
    engine = hermes_engine(tmp_path)
    engine.compress([SYSTEM, *conversation(8)], focus_topic="database migration", force=True)
    rows = fetch_all(engine.engine.store.conn, "SELECT content FROM summaries")
    assert rows
    assert any(str(r[0]).startswith("[msg_7 user] turn 3: The database migration") for r in rows)


def memory_messages(messages: list[dict[str, Any]]) -> list[str]:
    return [
        str(m["content"])
        for m in messages
        if m.get("role") == "system" and str(m.get("content")).startswith(MEMORY_CONTEXT_MARKER)
    ]


def test_memory_context_stays_in_the_system_part_and_is_never_stored(tmp_path: Path) -> None:
    engine = hermes_engine(tmp_path)
    recalled = "The user prefers metric units and lives in Lisbon."
    fitted = engine.compress([SYSTEM, *conversation(8)], memory_context=recalled, force=True)
    assert memory_messages(fitted) == [f"{MEMORY_CONTEXT_MARKER}\n{recalled}"]
    leading = 0
    while fitted[leading]["role"] == "system":
        leading += 1
    assert memory_messages(fitted[:leading]) and not memory_messages(fitted[leading:])
    store = engine.engine.store
    for table in ("messages", "summaries"):
        rows = fetch_all(store.conn, f"SELECT content FROM {table}")
        assert rows and all("Lisbon" not in str(r[0]) for r in rows), table

    # The host hands our context back; without a new memory context it is kept.
    turn = [{"role": "user", "content": "next question"}, {"role": "assistant", "content": "ok"}]
    again = engine.compress([*fitted, *turn], force=True)
    assert memory_messages(again) == [f"{MEMORY_CONTEXT_MARKER}\n{recalled}"]
    # A newer memory context replaces it: one memory message, never a stack.
    newer = engine.compress([*again, *turn], memory_context="The user moved to Porto.")
    assert memory_messages(newer) == [f"{MEMORY_CONTEXT_MARKER}\nThe user moved to Porto."]
    stored = fetch_all(store.conn, "SELECT content FROM messages")
    assert all(MEMORY_CONTEXT_MARKER not in str(r[0]) for r in stored)
