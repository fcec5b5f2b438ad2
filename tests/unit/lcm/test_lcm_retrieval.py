"""Retrieval: safe full-text queries, regex, scopes, expand pagination, output ranges."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from fakes.fixtures import FakeLLM
from support.lcm_conversations import simple_conversation

from hermes_runtime.common.errors import RuntimeFailure
from hermes_runtime.lcm.embed.embedbatch import embed_all
from hermes_runtime.lcm.engine.lcmengine import LcmEngine
from hermes_runtime.lcm.engine.tools import TOOL_NAMES
from hermes_runtime.lcm.search.hybrid import hybrid_search, vector_search
from hermes_runtime.lcm.search.navigate import describe, expand, read_output
from hermes_runtime.lcm.search.textsearch import grep
from hermes_runtime.lcm.store.schema import fetch_value


@pytest.fixture
def filled(engine: LcmEngine) -> LcmEngine:
    engine.ingest("alpha", simple_conversation(10))
    engine.ingest("alpha", [{"role": "user", "content": "the launch code is PELICAN-42"}])
    engine.ingest("beta", [{"role": "user", "content": "beta remembers PELICAN too"}])
    engine.compactions.compact("alpha", 600)
    return engine


@pytest.mark.parametrize(
    "hostile", ['"unbalanced', "NEAR(a b)", "a AND OR NOT", "col:val*", "^x", "(((", "' OR 1=1 --"]
)
def test_hostile_queries_never_raise(filled: LcmEngine, hostile: str) -> None:
    assert isinstance(grep(filled.store, hostile), list)


def test_grep_scopes(filled: LcmEngine) -> None:
    everywhere = grep(filled.store, "pelican")
    assert {h.session_id for h in everywhere} == {"alpha", "beta"}
    alpha = grep(filled.store, "pelican", session_id="alpha")
    assert alpha and {h.session_id for h in alpha} == {"alpha"}
    assert alpha[0].id.startswith("msg_")


def test_grep_finds_messages_folded_into_summaries(filled: LcmEngine) -> None:
    hits = grep(filled.store, "topic1", session_id="alpha")
    message_hits = [h for h in hits if h.kind == "message"]
    assert message_hits and message_hits[0].covered_by is not None
    expanded = expand(filled.store, message_hits[0].covered_by)
    assert message_hits[0].id in {s["id"] for s in expanded["sources"]} or expanded["sources"]


def test_regex_grep(filled: LcmEngine) -> None:
    hits = grep(filled.store, r"PELICAN-\d+", regex=True)
    assert [h.snippet for h in hits] == ["the launch code is PELICAN-42"]
    with pytest.raises(RuntimeFailure, match="regular expression"):
        grep(filled.store, "(unclosed", regex=True)


def test_expand_paginates_until_done(filled: LcmEngine) -> None:
    summary_id = fetch_value(filled.store.conn, "SELECT max(id) FROM summaries")
    ref = f"sum_{summary_id}"
    total = describe(filled.store, ref)["sources"]
    seen, offset = [], 0
    while offset is not None:
        page = expand(filled.store, ref, offset=offset, limit=2)
        seen += [s["id"] for s in page["sources"]]
        offset = page["next_offset"]
    assert len(seen) == total == len(set(seen))


def test_read_output_by_range(engine: LcmEngine) -> None:
    text = "".join(f"{i:05d}\n" for i in range(2_000))
    stored = engine.store.ingest("s", {"role": "tool", "tool_call_id": "c", "content": text})
    assert stored.output_id
    first = read_output(engine.store, stored.output_id, 0, 600)
    assert first["content"] == text[:600] and first["next_offset"] == 600
    last = read_output(engine.store, stored.output_id, len(text) - 6, 600)
    assert last["content"] == "01999\n" and last["next_offset"] is None


@pytest.mark.parametrize("bad", ["sum_x", "msg_", "nope", "sum_999999", "out_ffff"])
def test_bad_ids_are_named_in_the_error(engine: LcmEngine, bad: str) -> None:
    with pytest.raises(RuntimeFailure, match=bad):
        expand(engine.store, bad)


def test_tools_answer_json_even_on_errors(filled: LcmEngine) -> None:
    retrieval_tools = {"lcm_grep", "lcm_search", "lcm_describe", "lcm_expand", "lcm_read_output"}
    session_tools = {"lcm_recent", "lcm_load_session", "lcm_dag"}
    agent_tools = {"lcm_status", "lcm_doctor", "lcm_expand_query"}
    assert retrieval_tools | session_tools | agent_tools == TOOL_NAMES
    ok = json.loads(filled.handle_tool("lcm_grep", {"query": "pelican"}, "alpha"))
    assert ok["results"]
    err = json.loads(filled.handle_tool("lcm_expand", {"id": "sum_424242"}, "alpha"))
    assert "sum_424242" in err["error"]
    missing = json.loads(filled.handle_tool("lcm_grep", {}, "alpha"))
    assert "bad arguments" in missing["error"]


def test_hybrid_search_with_static_embeddings(engine: LcmEngine) -> None:
    from hermes_runtime.lcm.embed.embedders import StaticModelEmbedder

    engine.ingest("s", simple_conversation(6))
    dog = engine.store.ingest("s", {"role": "user", "content": "my dog is called Biscuit"})
    embedder = StaticModelEmbedder()
    assert embed_all(engine.store, embedder) == engine.store.counts()["messages"]
    assert engine.store.counts()["embed_queue"] == 0
    hits = hybrid_search(engine.store, embedder, "what is the name of my puppy dog", "s", 5)
    assert hits[0].id == dog.ref
    vector_only = hybrid_search(engine.store, embedder, "puppy dog", "s", 5, mode="vector")
    assert vector_only and all(h.kind in ("message", "summary") for h in vector_only)


def test_vectors_of_another_model_are_never_mixed(engine: LcmEngine) -> None:
    from hermes_runtime.lcm.embed.embedders import StaticModelEmbedder

    engine.ingest("s", [{"role": "user", "content": "unique walrus fact"}])
    embed_all(engine.store, StaticModelEmbedder())
    other = StaticModelEmbedder(model="some-other-model")
    assert vector_search(engine.store, other, "walrus", "s", 5) == []


def test_openai_embeddings_endpoint(tmp_path: Path, fake_llm: FakeLLM) -> None:
    from hermes_runtime.lcm.config import LcmConfig
    from hermes_runtime.lcm.embed.embedders import OpenAIEmbedder

    section = {
        "embeddings": "openai",
        "embeddings_base_url": fake_llm.base_url,
        "embeddings_model": "fake-embed",
        "embeddings_dim": 64,
    }
    lcm = LcmEngine(LcmConfig.for_home(tmp_path, section))
    try:
        assert isinstance(lcm.embedder, OpenAIEmbedder)
        target = lcm.store.ingest("s", {"role": "user", "content": "the harbour crane is red"})
        lcm.ingest("s", simple_conversation(4))
        assert embed_all(lcm.store, lcm.embedder) == lcm.store.counts()["messages"]
        hits = hybrid_search(lcm.store, lcm.embedder, "red harbour crane", "s", 3, mode="vector")
        assert hits[0].id == target.ref
        wrong = OpenAIEmbedder(fake_llm.base_url, "fake-embed", 32)
        with pytest.raises(ValueError, match="dimension 64, configured 32"):
            wrong.embed(["x"])
    finally:
        lcm.close()


def test_recent_activity_load_session_and_dag_tools(engine: LcmEngine) -> None:
    for name in ("first", "second", "third"):
        engine.ingest(name, simple_conversation(30))
    engine.ingest("first", [{"role": "user", "content": "latest words in first"}])
    engine.compactions.compact("second", 600)
    recent = json.loads(engine.handle_tool("lcm_recent", {"limit": 5}, "third"))["sessions"]
    assert [s["session_id"] for s in recent] == ["first", "second"]  # this session left out
    assert recent[0]["last_user_message"]["text"] == "latest words in first"
    assert recent[0]["messages"] == len(simple_conversation(30)) + 1
    assert recent[1]["summaries"] >= 1

    loaded = json.loads(
        engine.handle_tool("lcm_load_session", {"session_id": "second", "budget": 500}, "third")
    )
    assert loaded["session"] == "second" and 0 < loaded["tokens"] <= 500
    missing = json.loads(engine.handle_tool("lcm_load_session", {"session_id": "nope"}, "x"))
    assert "nope" in missing["error"]

    roots = json.loads(engine.handle_tool("lcm_dag", {}, "second"))
    assert roots["session_id"] == "second" and roots["summaries"]
    top = max(roots["summaries"], key=lambda node: node["depth"])
    node = json.loads(engine.handle_tool("lcm_dag", {"id": top["id"], "max_depth": 1}, "second"))
    assert node["id"] == top["id"] and node["seq_range"] == top["seq_range"]
    if node["depth"] > 0:
        assert all(child["depth"] < node["depth"] for child in node["children"])
    bad = json.loads(engine.handle_tool("lcm_dag", {"id": "msg_1"}, "second"))
    assert "sum_N" in bad["error"]
