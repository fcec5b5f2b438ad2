"""The tools an agent uses on its own memory: lcm_status, lcm_doctor, lcm_expand_query.

On real SQLite; lcm_expand_query's auxiliary model is the fake OpenAI-compatible server,
reached through Hermes' own ``call_llm`` (``compat/auxiliary.py``).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fakes.fixtures import FakeLLM, start_fake_llm
from support.lcm_conversations import simple_conversation

from hermes_runtime.compat import auxiliary_call
from hermes_runtime.lcm.config import HermesConfigFile, LcmConfig
from hermes_runtime.lcm.embed.embedbatch import embed_all
from hermes_runtime.lcm.embed.embedders import StaticModelEmbedder
from hermes_runtime.lcm.engine.expandquery import alternatives
from hermes_runtime.lcm.engine.lcmengine import LcmEngine
from hermes_runtime.lcm.engine.selfhelp import health
from hermes_runtime.lcm.engine.tools import (
    AUXILIARY_TOOLS,
    TIMED_TOOLS,
    TOOL_NAMES,
    TOOL_SCHEMAS,
    offered_schemas,
)
from hermes_runtime.lcm.store.fulltext import index_path
from hermes_runtime.lcm.store.lcmstore import LcmStore
from hermes_runtime.lcm.store.schema import fetch_value

AGENT_TOOLS = {"lcm_status", "lcm_doctor", "lcm_expand_query"}


def call(engine: LcmEngine, name: str, args: dict[str, Any], session: str = "alpha") -> Any:
    return json.loads(engine.handle_tool(name, args, session))


# -- schemas -----------------------------------------------------------------------------------


def test_the_new_tools_have_schemas_in_the_shape_hermes_registers() -> None:
    by_name = {t["name"]: t for t in TOOL_SCHEMAS}
    assert AGENT_TOOLS <= TOOL_NAMES
    for name in AGENT_TOOLS:
        schema = by_name[name]
        assert set(schema) == {"name", "description", "parameters"}
        assert schema["description"].strip() and schema["parameters"]["type"] == "object"
        json.dumps(schema)  # plain JSON, as the host sends it to the model
    assert by_name["lcm_status"]["parameters"]["properties"] == {}
    assert by_name["lcm_doctor"]["parameters"]["properties"] == {}
    expand = by_name["lcm_expand_query"]["parameters"]
    assert expand["required"] == ["query"]
    assert {"query", "count", "scope", "limit", "since", "until"} == set(expand["properties"])
    for name in TIMED_TOOLS:
        properties = by_name[name]["parameters"]["properties"]
        assert properties["since"]["type"] == properties["until"]["type"] == "string"
        assert "7d" in properties["since"]["description"]


def test_expand_query_is_offered_only_with_an_auxiliary_model() -> None:
    without = {t["name"] for t in offered_schemas(auxiliary=False)}
    assert without == TOOL_NAMES - AUXILIARY_TOOLS and "lcm_expand_query" not in without
    assert {t["name"] for t in offered_schemas(auxiliary=True)} == TOOL_NAMES
    offered = offered_schemas(auxiliary=True)
    offered[0]["parameters"]["properties"].clear()  # the host's copy, not ours
    assert TOOL_SCHEMAS[0]["parameters"]["properties"]


def test_the_plugin_offers_no_expand_query_without_register() -> None:
    from hermes_runtime.lcm.host.hermes_plugin import LcmContextEngine

    names = {t["name"] for t in LcmContextEngine().get_tool_schemas()}
    assert names == TOOL_NAMES - {"lcm_expand_query"}


@pytest.mark.parametrize(
    ("section", "named"),
    [
        (None, False),
        ({}, False),
        ({"provider": "auto", "model": "", "base_url": ""}, False),
        ({"provider": "main"}, True),
        ({"model": "small-model"}, True),
        ({"base_url": "http://127.0.0.1:9/v1"}, True),
        ("not a mapping", False),
    ],
)
def test_an_auxiliary_model_is_named_in_config_yaml(
    tmp_path: Path, section: object, named: bool
) -> None:
    auxiliary = {} if section is None else {"lcm_expand_query": section}
    (tmp_path / "config.yaml").write_text(json.dumps({"auxiliary": auxiliary}))
    assert HermesConfigFile.read(tmp_path).auxiliary_configured("lcm_expand_query") is named


# -- lcm_status --------------------------------------------------------------------------------


def test_status_counts_what_is_stored_embedded_and_compacted(tmp_path: Path) -> None:
    config = LcmConfig.for_home(tmp_path, {"embeddings": "off", "externalize_chars": 2_000})
    engine = LcmEngine(config, embedder=StaticModelEmbedder())
    try:
        conversation = simple_conversation(10)
        engine.ingest("alpha", conversation)
        engine.ingest("beta", [{"role": "tool", "tool_call_id": "c", "content": "x" * 5_000}])
        engine.compactions.compact("alpha", 600)
        messages = engine.store.counts()["messages"]
        status = call(engine, "lcm_status", {})
        stored, embedded, compacted = status["stored"], status["embedded"], status["compacted"]
        assert stored["messages"] == messages == len(conversation) + 1 and stored["sessions"] == 2
        assert stored["outputs"] == 1 and stored["database_bytes"] > 0
        assert stored["newest_message_at"].startswith(time.strftime("%Y-", time.gmtime()))
        summaries = compacted["summaries"]
        assert summaries >= 1 and compacted["max_summary_depth"] >= 1
        session = compacted["session"]
        assert session["id"] == "alpha" and session["messages"] == len(conversation)
        assert session["summaries"] == summaries and session["context_summaries"] >= 1
        assert session["context_messages"] < len(conversation)
        assert embedded["enabled"] and embedded["model"] == engine.embedder.model  # type: ignore[union-attr]
        assert embedded["items"] == messages + summaries
        assert embedded["pending"] == messages + summaries and embedded["embedded"] == 0
        assert embedded["worker_running"] is False

        embed_all(engine.store, StaticModelEmbedder())
        caught_up = call(engine, "lcm_status", {})["embedded"]
        assert caught_up["pending"] == 0 and caught_up["eta_seconds"] == 0
        assert caught_up["embedded"] == messages + summaries
    finally:
        engine.close()


def test_status_without_embeddings_says_so(engine: LcmEngine) -> None:
    engine.ingest("s", [{"role": "user", "content": "hello"}])
    embedded = call(engine, "lcm_status", {}, "s")["embedded"]
    assert embedded == {"enabled": False, "note": "embeddings off: lcm_search ranks by words only"}


# -- lcm_doctor --------------------------------------------------------------------------------


def test_doctor_reports_each_check_and_what_to_do(tmp_path: Path) -> None:
    config = LcmConfig.for_home(tmp_path, {"embeddings": "off", "externalize_chars": 2_000})
    engine = LcmEngine(config, embedder=StaticModelEmbedder())
    try:
        stored = engine.store.ingest(
            "s", {"role": "tool", "tool_call_id": "c", "content": "y" * 5_000}
        )
        engine.ingest("s", simple_conversation(4))
        embed_all(engine.store, StaticModelEmbedder())
        healthy = call(engine, "lcm_doctor", {}, "s")
        names = [c["name"] for c in healthy["checks"]]
        assert names == [
            "database_file",
            "foreign_keys",
            "fulltext_index",
            "outputs_on_disk",
            "orphan_outputs",
            "embeddings",
            "summaries",
        ]
        assert healthy["ok"], healthy
        assert all(c["ok"] and c["fix"] is None for c in healthy["checks"])

        relpath = fetch_value(engine.store.conn, "SELECT relpath FROM outputs")
        (config.outputs_dir / relpath).unlink()
        engine.ingest("s", [{"role": "user", "content": "a message with no vector yet"}])
        sick = call(engine, "lcm_doctor", {}, "s")
        problems = {c["name"]: c for c in sick["checks"] if not c["ok"]}
        assert not sick["ok"] and set(problems) == {"outputs_on_disk", "embeddings"}
        assert stored.output_id in problems["outputs_on_disk"]["detail"]
        assert "restores" in problems["outputs_on_disk"]["fix"]
        assert problems["embeddings"]["detail"].startswith("1 items not embedded yet")
        assert "lcm embed" in problems["embeddings"]["fix"]
        assert (config.outputs_dir / relpath).exists() is False  # read-only: nothing repaired
    finally:
        engine.close()


def test_doctor_names_a_missing_fulltext_index_and_repairs_nothing(tmp_path: Path) -> None:
    config = LcmConfig.for_home(tmp_path, {"embeddings": "off"})
    writer = LcmEngine(config)
    writer.ingest("s", [{"role": "user", "content": "hello"}])
    writer.close()
    index = index_path(config.db_path)
    index.unlink()
    reader = LcmStore(config.db_path, config.outputs_dir, readonly=True, create=False)
    try:
        answer = health(reader, None, worker=False)
    finally:
        reader.close()
    check = next(c for c in answer["checks"] if c["name"] == "fulltext_index")
    assert not answer["ok"] and not check["ok"] and "--rebuild-fts" in check["fix"]
    assert str(index) in check["detail"] and not index.exists()


# -- lcm_expand_query --------------------------------------------------------------------------

SCRIPT = [
    {
        "match": "secret word for the vault",
        "reply": '1. vault passphrase\n- "heliotrope"\nWhat was the secret word for the vault?',
    }
]


@pytest.fixture
def auxiliary_llm(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeLLM]:
    """The fake server, scripted, as Hermes' auxiliary model of ``lcm_expand_query``."""
    script = tmp_path / "script.json"
    script.write_text(json.dumps(SCRIPT))
    server = start_fake_llm(extra_args=["--script", str(script)])
    home = tmp_path / "hermes"
    home.mkdir()
    task = {"provider": "custom", "base_url": server.base_url, "api_key": "x", "model": "m"}
    (home / "config.yaml").write_text(json.dumps({"auxiliary": {"lcm_expand_query": task}}))
    monkeypatch.setenv("HERMES_HOME", str(home))
    try:
        yield server
    finally:
        server.stop()


def test_expand_query_searches_each_wording_and_merges(
    engine: LcmEngine, auxiliary_llm: FakeLLM
) -> None:
    engine.ingest("alpha", simple_conversation(6))
    fact = engine.store.ingest(
        "alpha", {"role": "user", "content": "the vault passphrase is heliotrope-14"}
    )
    engine.auxiliary = auxiliary_call("lcm_expand_query")
    question = "What was the secret word for the vault?"
    answer = call(engine, "lcm_expand_query", {"query": question, "count": 3})
    assert answer["queries"] == [question, "vault passphrase", "heliotrope"]
    assert "rewrite_error" not in answer
    top = answer["results"][0]
    assert top["id"] == fact.ref and set(top["queries"]) >= {"vault passphrase", "heliotrope"}
    sent = auxiliary_llm.requests()[-1]
    assert sent["messages"][-1]["content"] == question and not sent.get("tools")
    assert "3 different search queries" in sent["messages"][0]["content"]


def test_a_failing_auxiliary_model_still_searches_the_question(
    engine: LcmEngine, auxiliary_llm: FakeLLM
) -> None:
    engine.ingest("alpha", [{"role": "user", "content": "the vault passphrase is heliotrope-14"}])
    engine.auxiliary = auxiliary_call("lcm_expand_query")
    auxiliary_llm.set_mode("fail")
    answer = call(engine, "lcm_expand_query", {"query": "vault passphrase", "since": "1d"})
    assert answer["queries"] == ["vault passphrase"] and answer["rewrite_error"]
    assert "heliotrope" in answer["results"][0]["snippet"]


def test_expand_query_without_an_auxiliary_model_is_an_error(engine: LcmEngine) -> None:
    answer = call(engine, "lcm_expand_query", {"query": "anything"})
    assert answer == {"error": "lcm_expand_query: no auxiliary model is configured"}


def test_rewrites_drop_numbering_quotes_copies_and_extra_lines() -> None:
    reply = "Query 1: alpha\n\n2) 'beta'\n* alpha\nQUESTION\ngamma\ndelta"

    def model(messages: list[dict[str, str]], max_tokens: int) -> str:
        assert max_tokens > 0 and messages[0]["role"] == "system"
        return reply

    assert alternatives(model, "question", 3) == ["alpha", "beta", "gamma"]
