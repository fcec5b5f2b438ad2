"""Group commit of the turn hook (``writebehind.py``) on real SQLite files and threads.

The gateway's hook queues a turn; one thread commits the queue in batches.
What must hold: every read sees every turn queued before it, an error of
the writer thread reaches the next caller (never swallowed) and loses no
message (the next sync stores it again from the host's transcript), and
closing the engine commits the queue.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from pathlib import Path
from typing import Any

import apsw
import pytest
from support.lcm_conversations import SYSTEM, make_hermes_engine

from hermes_runtime.common.sqlite import connect
from hermes_runtime.lcm.host import hermes_plugin
from hermes_runtime.lcm.host.hermes_plugin import LcmContextEngine
from hermes_runtime.lcm.store import sessions
from hermes_runtime.lcm.store.writebehind import StalePlan

# Long enough that nothing in a test commits on the clock: what is stored was flushed.
QUEUED_MS = 10_000
REFUSE = (
    "CREATE TRIGGER test_refuse BEFORE INSERT ON messages "
    "BEGIN SELECT RAISE(ABORT, 'refused by the test'); END"
)


def turns(first: int, count: int = 1) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = []
    for i in range(first, first + count):
        messages += [
            {"role": "user", "content": f"question {i} about walrus{i} " + "words " * 10},
            {"role": "assistant", "content": f"answer {i} mentions pelican{i}"},
        ]
    return messages


def hook(engine: LcmContextEngine, history: list[dict[str, Any]]) -> None:
    engine._shared.store_turn(session_id="session-1", conversation_history=list(history))


def committed(tmp_path: Path) -> list[str]:
    """Contents stored in the file, read by another connection (what a crash would keep)."""
    conn = connect(tmp_path / "lcm.db", readonly=True)
    try:
        return [r[0] for r in conn.execute("SELECT content FROM messages ORDER BY id")]
    finally:
        conn.close()


def test_turns_are_queued_then_committed_in_one_batch(tmp_path: Path) -> None:
    engine = make_hermes_engine(tmp_path, commit_interval_ms=QUEUED_MS)
    history = [SYSTEM]
    for index in range(5):
        history += turns(index)
        hook(engine, history)
    assert committed(tmp_path) == []  # all five turns wait in the queue
    behind = engine.engine.store.group_commit
    assert behind is not None
    before = behind.batches
    engine.engine.flush()
    assert behind.batches == before + 1
    assert committed(tmp_path) == [m["content"] for m in history[1:]]
    engine.engine.close()


def test_every_read_sees_the_turns_queued_before_it(tmp_path: Path) -> None:
    engine = make_hermes_engine(tmp_path, commit_interval_ms=QUEUED_MS)
    lcm = engine.engine
    history = [SYSTEM]

    def queue_turn() -> int:
        index = len(history) // 2
        history.extend(turns(index))
        hook(engine, history)
        assert len(committed(tmp_path)) < len(history) - 1  # still queued
        return index

    def tool(name: str, **args: Any) -> Any:
        return json.loads(lcm.handle_tool(name, args, "session-1"))

    index = queue_turn()
    found = tool("lcm_grep", query=f"walrus{index}")["results"]
    assert [hit["role"] for hit in found] == ["user"]
    index = queue_turn()
    found = tool("lcm_search", query=f"pelican{index}")["results"]
    assert found and f"pelican{index}" in json.dumps(found)
    queue_turn()
    newest = len(history) - 1  # message ids follow the history (one session)
    assert tool("lcm_describe", id=f"msg_{newest}")["role"] == "assistant"
    queue_turn()
    newest = len(history) - 1
    expanded = tool("lcm_expand", id=f"msg_{newest}")
    assert history[-1]["content"] in json.dumps(expanded)
    queue_turn()
    loaded = tool("lcm_load_session", session_id="session-1", budget=32_000)
    assert history[-1]["content"] in json.dumps(loaded)
    queue_turn()
    assert lcm.context("session-1")[-1]["content"] == history[-1]["content"]
    queue_turn()
    assert lcm.store.counts()["messages"] == len(history) - 1
    queue_turn()
    fitted = engine.compress(list(history))
    assert fitted[-1]["content"] == history[-1]["content"]
    assert committed(tmp_path) == [m["content"] for m in history[1:]]  # each once
    lcm.close()


def test_close_commits_the_queue(tmp_path: Path) -> None:
    engine = make_hermes_engine(tmp_path, commit_interval_ms=QUEUED_MS)
    history = [SYSTEM, *turns(0, 3)]
    for end in (3, 5, 7):
        hook(engine, history[:end])
    assert committed(tmp_path) == []
    engine.engine.close()
    assert committed(tmp_path) == [m["content"] for m in history[1:]]


def wait_for_failure(engine: LcmContextEngine) -> None:
    behind = engine.engine.store.group_commit
    assert behind is not None
    deadline = time.monotonic() + 60
    while behind.failures == 0:
        assert time.monotonic() < deadline, "the writer thread never tried its batch"
        time.sleep(0.01)


def test_a_failed_batch_is_raised_by_the_next_hook_and_lost_turns_are_stored_again(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    engine = make_hermes_engine(tmp_path, commit_interval_ms=1)
    history = [SYSTEM, *turns(0)]
    hook(engine, history)
    engine.engine.flush()
    other = connect(tmp_path / "lcm.db")
    other.execute(REFUSE)  # a real SQLite error inside the writer thread's transaction
    history += turns(1)
    hook(engine, history)  # queued: the writer thread commits it and fails
    wait_for_failure(engine)
    history += turns(2)
    with caplog.at_level(logging.WARNING, logger=hermes_plugin.__name__):
        hook(engine, history)  # the next hook call reports the writer's error
    assert "refused by the test" in caplog.text
    assert len(committed(tmp_path)) == 2
    other.execute("DROP TRIGGER test_refuse")
    other.close()
    history += turns(3)
    hook(engine, history)
    engine.engine.flush()
    assert committed(tmp_path) == [m["content"] for m in history[1:]]  # nothing lost, once
    engine.engine.close()


def test_a_failed_batch_is_raised_by_the_next_read(tmp_path: Path) -> None:
    engine = make_hermes_engine(tmp_path, commit_interval_ms=1)
    other = connect(tmp_path / "lcm.db")
    other.execute(REFUSE)
    history = [SYSTEM, *turns(0)]
    hook(engine, history)
    wait_for_failure(engine)
    with pytest.raises(apsw.ConstraintError, match="refused by the test"):
        engine.engine.context("session-1")
    assert engine.engine.context("session-1") == []  # raised once; the turn is not stored
    other.execute("DROP TRIGGER test_refuse")
    other.close()
    fitted = engine.compress(list(history))  # compress syncs: the host still holds the turn
    assert fitted[-1]["content"] == history[-1]["content"]
    assert committed(tmp_path) == [m["content"] for m in history[1:]]
    engine.engine.close()


def test_a_flush_that_fails_raises_to_its_caller(tmp_path: Path) -> None:
    engine = make_hermes_engine(tmp_path, commit_interval_ms=QUEUED_MS)
    history = [SYSTEM, *turns(0)]
    hook(engine, history)
    other = connect(tmp_path / "lcm.db")
    other.execute(REFUSE)
    with pytest.raises(apsw.ConstraintError, match="refused by the test"):
        engine.engine.flush()
    other.execute("DROP TRIGGER test_refuse")
    other.close()
    history += turns(1)
    hook(engine, history)
    engine.engine.close()
    assert committed(tmp_path) == [m["content"] for m in history[1:]]


def test_commit_interval_zero_writes_each_turn_in_the_hook(tmp_path: Path) -> None:
    engine = make_hermes_engine(tmp_path, commit_interval_ms=0)
    assert engine.engine.store.group_commit is None
    history = [SYSTEM, *turns(0)]
    hook(engine, history)
    assert committed(tmp_path) == [m["content"] for m in history[1:]]
    engine.engine.close()


def test_a_write_planned_on_a_state_a_failure_dropped_is_refused(tmp_path: Path) -> None:
    """A sync reads the queued host state, another thread's flush fails and drops it:
    writing the sync's job would claim the dropped turn as stored. It is refused, and
    the next sync stores both turns."""
    engine = make_hermes_engine(tmp_path, commit_interval_ms=QUEUED_MS)
    store = engine.engine.store
    history = [SYSTEM, *turns(0)]
    hook(engine, history)  # queued, with the host state that lists turn 0
    planned_on = sessions.host_state_text(store, "session-1")  # what a sync plans the next turn on
    assert planned_on is not None
    other = connect(tmp_path / "lcm.db")
    other.execute(REFUSE)
    with pytest.raises(apsw.ConstraintError):
        engine.engine.flush()  # turn 0 is dropped from the queue
    other.execute("DROP TRIGGER test_refuse")
    other.close()
    with pytest.raises(StalePlan):
        store.ingest_many("session-1", turns(1), host_state=planned_on, defer=True)
    assert committed(tmp_path) == []
    history += turns(1)
    hook(engine, history)
    engine.engine.close()
    assert committed(tmp_path) == [m["content"] for m in history[1:]]


def test_hooks_of_many_sessions_and_reads_at_once_store_every_turn_once(tmp_path: Path) -> None:
    """Hermes runs agents on pooled threads: hooks of several sessions, compactions and
    tool reads interleave with the writer thread; nothing waits forever, nothing is lost."""
    engine = make_hermes_engine(tmp_path, commit_interval_ms=2)
    sessions = [f"hermes-{n}" for n in range(4)]
    histories: dict[str, list[dict[str, Any]]] = {}
    errors: list[BaseException] = []

    def agent(session: str) -> None:
        try:
            copy = engine.__deepcopy__({})  # Hermes deep-copies the engine per agent
            copy.on_session_start(session)
            history = [SYSTEM]
            for index in range(40):
                history += turns(index)
                copy._shared.store_turn(session_id=session, conversation_history=list(history))
                if index % 10 == 9:
                    history = copy.compress(list(history))
                if index % 7 == 0:
                    copy.engine.handle_tool("lcm_grep", {"query": f"walrus{index}"}, session)
            histories[session] = history
        except BaseException as exc:  # reported below, with the thread's session
            errors.append(exc)

    threads = [threading.Thread(target=agent, args=(s,)) for s in sessions]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(300)
    assert not any(t.is_alive() for t in threads), "an agent thread never finished"
    assert errors == []
    engine.engine.close()
    conn = connect(tmp_path / "lcm.db", readonly=True)
    try:
        for session in sessions:
            rows = [
                r[0]
                for r in conn.execute(
                    "SELECT content FROM messages WHERE session_id = ? ORDER BY seq", (session,)
                )
            ]
            assert rows == [m["content"] for m in [SYSTEM, *turns(0, 40)][1:]], session
    finally:
        conn.close()


def test_session_end_and_the_finalize_hook_commit_the_queue(tmp_path: Path) -> None:
    """Hermes' gateway ends with ``os._exit`` (no ``atexit``) after calling, for each live
    agent, the ``on_session_finalize`` hook and the engine's ``on_session_end``."""
    engine = make_hermes_engine(tmp_path, commit_interval_ms=QUEUED_MS)
    history = [SYSTEM, *turns(0)]
    hook(engine, history)
    assert committed(tmp_path) == []
    engine.on_session_end("session-1", [])
    assert committed(tmp_path) == [m["content"] for m in history[1:]]
    history += turns(1)
    hook(engine, history)
    engine._shared.commit_queue(session_id="session-1", platform="gateway", reason="shutdown")
    assert committed(tmp_path) == [m["content"] for m in history[1:]]
    history += turns(2)
    hook(engine, history)
    engine.on_session_end("session-1", list(history))  # nothing new to sync: still commits
    assert committed(tmp_path) == [m["content"] for m in history[1:]]
    engine.engine.close()
