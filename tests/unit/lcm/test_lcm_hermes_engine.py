"""The Hermes ContextEngine: copies share state, compress is idempotent and thread-safe."""

from __future__ import annotations

import copy
import importlib.metadata
import json
import threading
import time
from pathlib import Path
from typing import Any

from agent.context_engine import ContextEngine
from support.lcm_conversations import SYSTEM, make_hermes_engine, reconstruct, simple_conversation

from hermes_runtime.lcm.compact.assembly import validation_errors
from hermes_runtime.lcm.config import LcmConfig
from hermes_runtime.lcm.host.hermes_plugin import register
from hermes_runtime.lcm.store import sessions


def test_entry_point_points_at_register() -> None:
    points = importlib.metadata.entry_points(group="hermes_agent.plugins")
    lcm = [p for p in points if p.name == "lcm"]
    assert lcm and lcm[0].load().register is register

    class Ctx:
        engine: Any = None
        hooks: dict[str, Any] = {}

        def register_context_engine(self, engine: Any) -> None:
            self.engine = engine

        def register_hook(self, name: str, callback: Any) -> None:
            self.hooks[name] = callback

    ctx = Ctx()
    register(ctx)
    assert isinstance(ctx.engine, ContextEngine) and ctx.engine.name == "lcm"
    assert ctx.hooks["post_llm_call"].__self__ is ctx.engine._shared
    assert ctx.hooks["on_session_finalize"].__self__ is ctx.engine._shared
    assert ctx.hooks["pre_llm_call"].__self__ is ctx.engine._shared
    assert ctx.hooks["pre_llm_call"](session_id="s", user_message="hi") is None  # no context


def test_deepcopy_shares_store_but_not_counters(tmp_path: Path) -> None:
    engine = make_hermes_engine(tmp_path)
    clone = copy.deepcopy(engine)
    assert clone.engine is engine.engine
    clone.update_from_response({"prompt_tokens": 123, "completion_tokens": 1, "total_tokens": 124})
    assert engine.last_prompt_tokens == 0 and clone.last_prompt_tokens == 123


def test_thresholds_follow_the_model(tmp_path: Path) -> None:
    engine = make_hermes_engine(tmp_path, threshold_percent=0.5, target_percent=0.3)
    assert engine.threshold_tokens == 10_000
    assert engine.should_compress(10_000) and not engine.should_compress(9_999)


def test_compress_returns_valid_fitting_lossless_context(tmp_path: Path) -> None:
    engine = make_hermes_engine(tmp_path)
    history = simple_conversation(80, filler=40)
    result = engine.compress([SYSTEM, *history], current_tokens=30_000)
    assert result[0] == SYSTEM
    assert validation_errors(result) == []
    assert len(result) < len(history)
    assert reconstruct(engine.engine.store, result[1:]) == history


def test_repeated_compress_never_duplicates(tmp_path: Path) -> None:
    engine = make_hermes_engine(tmp_path)
    history = simple_conversation(60, filler=40)
    host = engine.compress([SYSTEM, *history])
    extra = simple_conversation(3)
    host = engine.compress([*host, *extra])
    host = engine.compress(host)  # nothing new: nothing ingested
    store = engine.engine.store
    assert store.counts()["messages"] == len(history) + len(extra)
    assert reconstruct(store, host[1:]) == history + extra


def test_tool_call_ingests_live_messages_and_answers(tmp_path: Path) -> None:
    engine = make_hermes_engine(tmp_path)
    live = [SYSTEM, {"role": "user", "content": "remember the password is KESTREL"}]
    answer = json.loads(engine.handle_tool_call("lcm_grep", {"query": "kestrel"}, messages=live))
    assert answer["results"][0]["snippet"].lower().count("kestrel") == 1


def test_rotation_keeps_the_lcm_session(tmp_path: Path) -> None:
    engine = make_hermes_engine(tmp_path)
    engine.on_session_start("child-2", old_session_id="session-1")
    assert engine.session_id == "session-1"
    engine.on_session_start("fresh-3")
    assert engine.session_id == "fresh-3"


def test_parallel_sessions_on_pooled_threads(tmp_path: Path) -> None:
    base = make_hermes_engine(tmp_path)
    errors: list[BaseException] = []
    results: dict[str, list[dict[str, Any]]] = {}

    def run(name: str) -> None:
        try:
            agent = copy.deepcopy(base)
            agent.on_session_start(name)
            history = simple_conversation(40, filler=30)
            host = [SYSTEM]
            for start in range(0, len(history), 10):
                host = agent.compress(host + history[start : start + 10])
            results[name] = host
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(f"s{i}",)) for i in range(4)]
    threads += [threading.Thread(target=run, args=("s0",))]  # same session twice at once
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    store = base.engine.store
    expected = simple_conversation(40, filler=30)
    for name in ("s1", "s2", "s3"):
        assert reconstruct(store, results[name][1:]) == expected
    rows = dict(store.conn.execute("SELECT session_id, count(*) FROM messages GROUP BY 1"))
    assert rows["s1"] == rows["s2"] == rows["s3"] == len(expected)


def test_bad_config_names_the_field(tmp_path: Path) -> None:
    import pytest

    from hermes_runtime.common.errors import RuntimeFailure

    with pytest.raises(RuntimeFailure, match=r"lcm\.target_percent"):
        LcmConfig.for_home(tmp_path, {"threshold_percent": 0.5, "target_percent": 0.6})
    with pytest.raises(RuntimeFailure, match=r"lcm\.fresh_tail_mesages: unknown"):
        LcmConfig.for_home(tmp_path, {"fresh_tail_mesages": 3})
    with pytest.raises(RuntimeFailure, match=r"lcm\.leaf_chunk_tokens: expected int"):
        LcmConfig.for_home(tmp_path, {"leaf_chunk_tokens": "many"})


def test_user_typing_our_header_is_still_stored(tmp_path: Path) -> None:
    engine = make_hermes_engine(tmp_path)
    typed = {
        "role": "user",
        "content": '[LCM summary sum_1 | depth 0 | expand with lcm_expand(id="sum_1")]',
    }
    engine.compress([SYSTEM, typed])
    assert engine.engine.store.counts()["messages"] == 1


def merge_same_roles(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """What Hermes does to a transcript: consecutive user messages become one."""
    merged: list[dict[str, Any]] = []
    for message in messages:
        if merged and message["role"] == "user" == merged[-1]["role"]:
            merged[-1] = {
                **merged[-1],
                "content": f"{merged[-1]['content']}\n\n{message['content']}",
            }
        else:
            merged.append(dict(message))
    return merged


def test_host_merging_our_block_never_duplicates(tmp_path: Path) -> None:
    engine = make_hermes_engine(tmp_path, fresh_tail_messages=3)
    history = simple_conversation(40, filler=40)
    host = merge_same_roles(engine.compress([SYSTEM, *history]))
    extra = simple_conversation(2)
    host = merge_same_roles(engine.compress([*host, *extra]))
    engine.handle_tool_call("lcm_grep", {"query": "x"}, messages=host)
    assert engine.engine.store.counts()["messages"] == len(history) + len(extra)


def test_host_dropping_its_last_message_stores_nothing_new(tmp_path: Path) -> None:
    engine = make_hermes_engine(tmp_path)
    history = simple_conversation(5)
    engine.compress([SYSTEM, *history])
    engine.compress([SYSTEM, *history[:-1]])
    assert engine.engine.store.counts()["messages"] == len(history)


def test_day_one_import_archives_hermes_history(tmp_path: Path) -> None:
    from hermes_state import SessionDB

    from hermes_runtime.lcm.host.plugin_host import IMPORT_PREFIX, start_day_one_import

    state = SessionDB(tmp_path / "state.db")
    state.create_session("before-lcm", source="cli")
    state.append_message("before-lcm", "user", "the boiler code is 4471")
    state.close()
    engine = make_hermes_engine(tmp_path)
    core = engine.engine
    deadline = time.monotonic() + 30
    while (
        not sessions.has_session(core.store, IMPORT_PREFIX + "before-lcm")
        and time.monotonic() < deadline
    ):
        time.sleep(0.05)
    answer = json.loads(engine.handle_tool_call("lcm_grep", {"query": "boiler", "scope": "all"}))
    assert answer["results"][0]["session_id"] == IMPORT_PREFIX + "before-lcm"
    assert start_day_one_import(core, tmp_path / "state.db", time.time()) is None  # only once


def test_config_embeddings_choice_builds_that_embedder(tmp_path: Path) -> None:
    from hermes_runtime.lcm.embed.embedders import make_embedder

    def model_for(section: dict[str, Any]) -> str | None:
        embedder = make_embedder(LcmConfig.for_home(tmp_path, section))
        return None if embedder is None else embedder.model

    assert model_for({}) == model_for({"embeddings": "e5"})  # e5 is the default
    assert str(model_for({"embeddings": "e5"})).startswith("e5-small-int")  # on ONNX Runtime
    assert str(model_for({"embeddings": "static"})).startswith("tokenlearn-static-model")
    assert model_for({"embeddings": "off"}) is None
