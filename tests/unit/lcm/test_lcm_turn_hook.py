"""The ``post_llm_call`` hook stores every turn as it happens, in the right LCM session.

Hermes calls the hook once per turn with the Hermes session id and the
turn's transcript; the hook must find the LCM session an engine copy bound
to that id (also after a compaction rotated the id), never store a message
twice alongside the engine's own syncs, and never raise or stall.
"""

from __future__ import annotations

import copy
import logging
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from hermes_cli.plugins import clear_thread_tool_whitelist, set_thread_tool_whitelist
from support.lcm_conversations import SYSTEM, make_hermes_engine, simple_conversation

from hermes_runtime.common.sqlite import connect
from hermes_runtime.lcm.host import sharedengine
from hermes_runtime.lcm.host.hermes_plugin import LcmContextEngine
from hermes_runtime.lcm.store import sessions, writebehind


def plain_turns(first: int, count: int = 1) -> list[dict[str, Any]]:
    """Turns without tools, each with its own text (what a plain chat adds per turn)."""
    messages: list[dict[str, Any]] = []
    for i in range(first, first + count):
        messages += [
            {"role": "user", "content": f"plain question {i} " + "words " * 10},
            {"role": "assistant", "content": f"plain answer {i}"},
        ]
    return messages


def hook(engine: LcmContextEngine, session_id: str, history: list[dict[str, Any]]) -> None:
    """Call the hook the way Hermes' turn finalizer does (keyword arguments only)."""
    engine._shared.store_turn(
        session_id=session_id,
        task_id="task",
        turn_id="turn",
        user_message=history[-2]["content"] if len(history) > 1 else "",
        assistant_response=history[-1].get("content") or "",
        conversation_history=list(history),
        model="fake-model",
        platform="api_server",
    )


def user_texts(engine: LcmContextEngine, session: str) -> list[str]:
    rows = engine.engine.store.conn.execute(
        "SELECT content FROM messages WHERE session_id = ? AND role = 'user' ORDER BY seq",
        (session,),
    )
    return [r[0] for r in rows]


def test_each_plain_turn_is_stored_right_after_it(tmp_path: Path) -> None:
    engine = make_hermes_engine(tmp_path)
    history: list[dict[str, Any]] = []
    for turn in range(3):
        history += plain_turns(turn)
        hook(engine, "session-1", history)
        assert engine.engine.store.counts()["messages"] == len(history)
    assert user_texts(engine, "session-1") == [m["content"] for m in history if m["role"] == "user"]


def test_rotation_resolves_to_the_kept_session_for_hook_and_new_agents(tmp_path: Path) -> None:
    engine = make_hermes_engine(tmp_path)
    history = simple_conversation(2)
    engine.on_session_start("child-2", old_session_id="session-1", boundary_reason="compression")
    hook(engine, "child-2", history)
    assert sessions.session_ids(engine.engine.store) == ["session-1"]
    later_agent = copy.deepcopy(engine)
    later_agent._session_id = ""
    later_agent.on_session_start("child-2")  # a new agent for the rotated id
    assert later_agent.session_id == "session-1"


def test_hook_compress_and_tool_sync_never_duplicate(tmp_path: Path) -> None:
    engine = make_hermes_engine(tmp_path, fresh_tail_messages=4)
    history = simple_conversation(30, filler=40)
    hook(engine, "session-1", history[:10])
    host = engine.compress([SYSTEM, *history], current_tokens=30_000)
    hook(engine, "session-1", host[1:])  # the turn ends with the compacted transcript
    extra = plain_turns(100, 2)
    engine.handle_tool_call("lcm_grep", {"query": "x"}, messages=[*host, *extra[:1]])
    hook(engine, "session-1", [*host[1:], *extra])
    hook(engine, "session-1", [*host[1:], *extra])  # a repeated hook stores nothing
    store = engine.engine.store
    assert store.counts()["messages"] == len(history) + len(extra)
    expected = [m["content"] for m in [*history, *extra] if m["role"] == "user"]
    assert user_texts(engine, "session-1") == expected


def test_unbound_session_and_review_fork_store_nothing(tmp_path: Path) -> None:
    engine = make_hermes_engine(tmp_path)
    history = simple_conversation(2)
    hook(engine, "never-bound", history)  # another context engine owns that session
    set_thread_tool_whitelist({"memory", "skill_manage"})  # Hermes' background review thread
    try:
        hook(engine, "session-1", history)
    finally:
        clear_thread_tool_whitelist()
    assert engine.engine.store.counts()["messages"] == 0


def test_busy_database_holds_the_turn_with_a_warning_and_stores_it_once_free(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Another process holds the write lock past the hook's wait: the hook returns (never
    waits 30 s), and the turn is held in memory and stored once the lock is free, not
    dropped (a client that sends its own history never hands it to LCM again, issue 30)."""
    monkeypatch.setattr(sharedengine, "TURN_SYNC_WAIT_SECONDS", 0.2)
    engine = make_hermes_engine(tmp_path, commit_interval_ms=0)  # a transaction a turn
    first = plain_turns(0)
    other_process = connect(tmp_path / "lcm.db")
    other_process.execute("BEGIN IMMEDIATE")
    try:
        with caplog.at_level(logging.WARNING, logger=writebehind.__name__):
            started = time.monotonic()
            hook(engine, "session-1", first)  # must return, not raise, not wait 30 s
            waited = time.monotonic() - started
    finally:
        other_process.execute("ROLLBACK")
        other_process.close()
    assert waited < 10
    assert "session-1" in caplog.text and "held in memory" in caplog.text
    history = [*first, *plain_turns(1)]
    hook(engine, "session-1", history)
    engine.engine.flush()
    assert engine.engine.store.counts()["messages"] == len(history)  # each once


def test_busy_database_does_not_hold_a_queued_turn_and_it_is_stored_once_free(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """With group commit on the hook only queues: another process's write lock holds the
    writer thread, never Hermes' turn; the turn is stored after it."""
    engine = make_hermes_engine(tmp_path, commit_interval_ms=50)
    first = plain_turns(0)
    other_process = connect(tmp_path / "lcm.db")
    other_process.execute("BEGIN IMMEDIATE")
    try:
        with caplog.at_level(logging.WARNING, logger=sharedengine.__name__):
            hook(engine, "session-1", first)  # returns with the lock still held
        assert caplog.text == ""
    finally:
        other_process.execute("ROLLBACK")
        other_process.close()
    assert user_texts(engine, "session-1") == [first[0]["content"]]
    history = [*first, *plain_turns(1)]
    hook(engine, "session-1", history)
    assert engine.engine.store.counts()["messages"] == len(history)


def test_compaction_holding_the_session_skips_the_hook(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(sharedengine, "TURN_SYNC_WAIT_SECONDS", 0.1)
    engine = make_hermes_engine(tmp_path)
    held, release = threading.Event(), threading.Event()

    def hold_session() -> None:
        with engine.engine.session_lock("session-1"):
            held.set()
            release.wait(10)

    holder = threading.Thread(target=hold_session)
    holder.start()
    held.wait(10)
    try:
        with caplog.at_level(logging.WARNING, logger=sharedengine.__name__):
            hook(engine, "session-1", plain_turns(0))
    finally:
        release.set()
        holder.join()
    assert "busy" in caplog.text
    assert engine.engine.store.counts()["messages"] == 0
