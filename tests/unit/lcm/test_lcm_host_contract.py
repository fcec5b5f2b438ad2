"""The LCM engine under Hermes' newer context-engine contract (v0.21+).

What the host does there (``developer-guide/context-engine-plugin.md``, "Thread
safety"): ``compress()`` runs on a pooled thread under a host timeout; after
the timeout the host keeps its own transcript and discards whatever the late
call returns; its stall fallback retries on the same engine object while the
late call still runs; passes of different sessions run at the same time on
one shared engine. Each test drives the real engine (real SQLite, the fake LLM
server for summaries) exactly that way: a ``ThreadPoolExecutor``,
``future.result(timeout=...)`` that gives up, the engine deep-copied as the
host's agents do.
"""

from __future__ import annotations

import concurrent.futures
import copy
from pathlib import Path
from typing import Any

import pytest
from fakes.fixtures import FakeLLM
from support.lcm_conversations import SYSTEM, reconstruct, simple_conversation

from hermes_runtime.lcm.compact.assembly import validation_errors
from hermes_runtime.lcm.config import LcmConfig
from hermes_runtime.lcm.host.hermes_plugin import LcmContextEngine
from hermes_runtime.lcm.store.lcmstore import LcmStore

HOST_TIMEOUT = 0.1  # what the host waits for compress() before it gives up
LLM_STALL = 2.0  # how long the summary model stalls: far past the host's patience
CONTEXT_LENGTH = 20_000


def registered_engine(
    tmp_path: Path, llm: FakeLLM, context_length: int = CONTEXT_LENGTH
) -> LcmContextEngine:
    """The engine ``register`` hands Hermes, its summaries made by the fake LLM."""
    config = LcmConfig.for_home(tmp_path, {"embeddings": "off"})
    engine = LcmContextEngine(config)
    engine.update_model("fake-model", context_length, base_url=llm.base_url, api_key="k")
    return engine


def agent_copy(registered: LcmContextEngine, session: str) -> LcmContextEngine:
    """What each Hermes agent runs: a deep copy of the registered engine, bound to a session."""
    engine = copy.deepcopy(registered)
    engine.on_session_start(session)
    return engine


def gives_up(future: concurrent.futures.Future[Any]) -> None:
    """The host's timeout: it stops waiting and will never use this future's result."""
    with pytest.raises(concurrent.futures.TimeoutError):
        future.result(timeout=HOST_TIMEOUT)


def summary_sources(store: LcmStore) -> tuple[list[int], list[int]]:
    """Every message id and every child summary id that a summary folds, with repeats."""
    rows = store.conn.execute("SELECT message_id, child_id FROM summary_sources").fetchall()
    messages = [int(m) for m, _ in rows if m is not None]
    children = [int(c) for _, c in rows if c is not None]
    return messages, children


def assert_dag_intact(store: LcmStore, session: str, context: list[dict[str, Any]]) -> None:
    """One summary per input range, every summary in use, every message reachable."""
    messages, children = summary_sources(store)
    assert len(messages) == len(set(messages)), "a message was summarized twice"
    assert len(children) == len(set(children)), "a summary was condensed twice"
    in_context = {
        int(s)
        for (s,) in store.conn.execute(
            "SELECT summary_id FROM context_items WHERE session_id = ? AND summary_id IS NOT NULL",
            (session,),
        )
    }
    ids = {
        int(s)
        for (s,) in store.conn.execute("SELECT id FROM summaries WHERE session_id = ?", (session,))
    }
    assert ids == in_context | (ids & set(children)), "a summary nobody reaches"
    assert validation_errors(context) == []


def test_late_compress_and_its_stall_retry_store_and_summarize_once(
    tmp_path: Path, fake_llm: FakeLLM
) -> None:
    """The host gives up on compress(), retries on the same engine (also given up on:
    it waits for the first), keeps its own transcript and goes on. Old code: the
    second late call overwrote what the host was known to hold, so the host's next
    turn stored its whole transcript again (and summarized it again)."""
    agent = agent_copy(registered_engine(tmp_path, fake_llm), "s1")
    history = simple_conversation(30, filler=40)
    host = [SYSTEM, *history]
    fake_llm.set_mode("hang", hang_seconds=LLM_STALL)
    with concurrent.futures.ThreadPoolExecutor(max_workers=4) as pool:
        first = pool.submit(agent.compress, copy.deepcopy(host), 12_000)
        gives_up(first)
        retry = pool.submit(agent.compress, copy.deepcopy(host), 12_000)
        gives_up(retry)
        fake_llm.set_mode("normal")
        concurrent.futures.wait([first, retry])  # late work ends; its results are dropped
        assert first.exception() is None and retry.exception() is None
    turn = [{"role": "user", "content": "and the ferry?"}, {"role": "assistant", "content": "at 9"}]
    host += turn  # the host went on with the transcript it kept
    agent._shared.store_turn(session_id="s1", conversation_history=host)
    fitted = agent.compress(copy.deepcopy(host), 12_000)
    store = agent.engine.store
    assert store.counts()["messages"] == len(history) + len(turn)
    assert reconstruct(store, fitted[1:]) == history + turn
    assert_dag_intact(store, "s1", fitted)


def test_host_that_drops_every_late_compress_stores_each_message_once(
    tmp_path: Path, fake_llm: FakeLLM
) -> None:
    """A slow summary model: every compress() is late and dropped, turn after turn, while
    each one folds more of the session. Old code: from the second dropped compaction on,
    what the host held was forgotten and its whole transcript was stored again."""
    agent = agent_copy(registered_engine(tmp_path, fake_llm, context_length=2_400), "s1")
    history = simple_conversation(24, filler=40)
    host = [SYSTEM, *history[:40]]
    with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
        for end in (56, len(history)):
            fake_llm.set_mode("hang", hang_seconds=LLM_STALL)
            late = pool.submit(agent.compress, copy.deepcopy(host))
            gives_up(late)
            fake_llm.set_mode("normal")
            concurrent.futures.wait([late])
            assert late.exception() is None
            host += history[len(host) - 1 : end]  # the host's next turns, on its own list
            agent._shared.store_turn(session_id="s1", conversation_history=host)
    fitted = agent.compress(copy.deepcopy(host))
    store = agent.engine.store
    assert store.counts()["messages"] == len(history)
    assert reconstruct(store, fitted[1:]) == history
    assert_dag_intact(store, "s1", fitted)


def test_late_compress_leaves_the_counters_to_its_retry(tmp_path: Path, fake_llm: FakeLLM) -> None:
    """The host restores the fields it reads and retries on the same object; the late call
    ends last. Old code: it counted a compaction the host dropped (compression_count 2),
    and the retry, finding the summaries written, reported no progress."""
    agent = agent_copy(registered_engine(tmp_path, fake_llm), "s1")
    host = [SYSTEM, *simple_conversation(30, filler=40)]
    fake_llm.set_mode("hang", hang_seconds=LLM_STALL)
    with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
        late = pool.submit(agent.compress, copy.deepcopy(host), 12_000)
        gives_up(late)
        retry = pool.submit(agent.compress, copy.deepcopy(host), 12_000)
        fake_llm.set_mode("normal")
        fitted = retry.result()  # this time the host waits: it uses what the retry returns
        concurrent.futures.wait([late])
    assert late.exception() is None
    assert agent.compression_count == 1
    assert agent._last_compression_made_progress is True
    assert agent.last_prompt_tokens == -1  # "compacted: wait for the provider's real usage"
    assert len(fitted) < len(host)


def test_sessions_compress_at_once_on_one_shared_engine(tmp_path: Path, fake_llm: FakeLLM) -> None:
    """Passes of different sessions run at the same time on pool siblings, each on its
    agent's copy of the one registered engine (one database). Today's code already does
    this right: kept as a guard."""
    registered = registered_engine(tmp_path, fake_llm)
    sessions = [f"s{i}" for i in range(4)]
    agents = {s: agent_copy(registered, s) for s in sessions}
    histories = {s: simple_conversation(30, filler=40 + i) for i, s in enumerate(sessions)}
    hosts = {s: [SYSTEM] for s in sessions}
    with concurrent.futures.ThreadPoolExecutor(max_workers=len(sessions)) as pool:
        for start in range(0, 90, 30):
            futures = {
                s: pool.submit(
                    agents[s].compress, copy.deepcopy(hosts[s] + histories[s][start : start + 30])
                )
                for s in sessions
            }
            hosts = {s: f.result() for s, f in futures.items()}  # the host commits each
    store = registered.engine.store
    for s in sessions:
        assert reconstruct(store, hosts[s][1:]) == histories[s]
        assert_dag_intact(store, s, hosts[s])
    rows = dict(store.conn.execute("SELECT session_id, count(*) FROM messages GROUP BY 1"))
    assert rows == {s: len(histories[s]) for s in sessions}


def test_two_engines_on_one_database_summarize_each_range_once(
    tmp_path: Path, fake_llm: FakeLLM
) -> None:
    """Two engines (no shared session lock: two processes, or the CLI beside the gateway)
    compact the same session at the same time: a summary replaces its run only if every
    item of the run is still in the context, in the same transaction, so each range is
    summarized once. Today's store already does this: kept as a guard."""
    first = registered_engine(tmp_path, fake_llm)
    first.on_session_start("s1")
    history = simple_conversation(30, filler=40)
    first.engine.ingest("s1", history)
    second = registered_engine(tmp_path, fake_llm)
    second.on_session_start("s1")
    fake_llm.set_mode("hang", hang_seconds=0.5)  # both plan before either writes
    with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
        runs = [pool.submit(e.engine.compactions.compact, "s1", 1_500) for e in (first, second)]
        reports = [run.result() for run in runs]
    assert all(r.fits for r in reports)
    store = first.engine.store
    context = first.engine.context("s1")
    assert reconstruct(store, context) == history
    assert_dag_intact(store, "s1", context)


def test_on_turn_complete_stores_the_turn_once(tmp_path: Path, fake_llm: FakeLLM) -> None:
    """Hermes from v0.21 hands the finished turn to ``on_turn_complete``, and its
    ``post_llm_call`` hook fires too. Old code: no such method (the ABC's no-op there)."""
    agent = agent_copy(registered_engine(tmp_path, fake_llm), "s1")
    transcript = [SYSTEM, *simple_conversation(3)]
    agent.on_turn_complete(list(transcript), usage={"prompt_tokens": 10}, turn_id="t1")
    agent._shared.store_turn(session_id="s1", conversation_history=transcript)
    assert agent.engine.store.counts()["messages"] == len(transcript) - 1
