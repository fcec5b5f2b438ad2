"""Host round trips: session bindings survive restarts, replays are not stored twice.

Each case is a way Hermes hands LCM a transcript seen in real runs: a
session reloaded from ``state.db`` with extra keys (``X-Hermes-Session-Id``),
the pre-compaction transcript handed to the turn hook after a compaction in
the same turn, and a gateway restart after Hermes rotated its session id.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from hermes_runtime.common.sqlite import connect
from hermes_runtime.lcm.config import LcmConfig
from hermes_runtime.lcm.engine.lcmengine import LcmEngine
from hermes_runtime.lcm.host.hermes_plugin import LcmContextEngine
from hermes_runtime.lcm.store import sessions
from hermes_runtime.lcm.store.lcmstore import LcmStore
from hermes_runtime.lcm.store.schema import MIGRATIONS, fetch_all, schema_version

SYSTEM = {"role": "system", "content": "You are Hermes."}


def turn(index: int, size: int = 40) -> list[dict[str, Any]]:
    """A user question and its answer of about ``size`` characters each (words, not base64)."""
    return [
        {"role": "user", "content": f"question {index}" + " q" * (size // 2)},
        {"role": "assistant", "content": f"answer {index}" + " a" * (size // 2)},
    ]


def as_reloaded(message: dict[str, Any]) -> dict[str, Any]:
    """What Hermes' SessionDB.get_messages_as_conversation gives back for a message."""
    copy = dict(message)
    copy["timestamp"] = 1795000000.5
    if copy["role"] == "assistant":
        copy["finish_reason"] = "stop"
    if isinstance(copy.get("content"), str) and copy["role"] in ("user", "assistant"):
        copy["content"] = copy["content"].strip()
    return copy


def stored(store: LcmStore, session: str) -> list[tuple[str, str]]:
    rows = fetch_all(
        store.conn,
        "SELECT role, content FROM messages WHERE session_id = ? ORDER BY seq",
        (session,),
    )
    return [(str(r[0]), str(r[1])) for r in rows]


def test_a_version_1_database_migrates_with_its_data_and_sheds_empty_sessions(
    tmp_path: Path,
) -> None:
    db = tmp_path / "lcm.db"
    conn = connect(db)
    conn.execute(MIGRATIONS[0])
    conn.execute("PRAGMA user_version = 1")
    conn.execute("INSERT INTO sessions(id, created_at) VALUES ('old', 1.0), ('empty', 1.0)")
    conn.execute(
        "INSERT INTO messages(session_id, seq, role, content, token_count, created_at) "
        "VALUES ('old', 1, 'user', 'kept across the upgrade', 9, 1.0)"
    )
    conn.close()

    store = LcmStore(db, tmp_path / "outputs")
    assert schema_version(store.conn) == len(MIGRATIONS) == 4
    assert stored(store, "old") == [("user", "kept across the upgrade")]
    assert sessions.session_ids(store) == ["old"]  # the empty one (release <= 2 made them) is gone
    assert sessions.host_session(store, "hermes-1") is None
    sessions.bind_host_session(store, "hermes-1", "old")
    sessions.bind_host_session(store, "hermes-2", "new-session")
    assert sessions.host_session(store, "hermes-1") == "old"
    assert sessions.host_session(store, "hermes-2") == "new-session"
    assert not sessions.has_session(store, "new-session")  # a binding creates no session
    store.ingest("new-session", {"role": "user", "content": "first message"})
    assert sessions.has_session(store, "new-session")
    store.close()

    reopened = LcmStore(db, tmp_path / "outputs")
    assert schema_version(reopened.conn) == 4
    assert sessions.host_session(reopened, "hermes-1") == "old"
    assert stored(reopened, "old") == [("user", "kept across the upgrade")]
    reopened.close()


def test_binding_and_host_state_create_no_session(store: LcmStore) -> None:
    sessions.bind_host_session(store, "fork-1", "fork-1")  # Hermes' review fork: its own fresh id
    sessions.bind_host_session(store, "rotated-2", "fork-1")
    sessions.set_host_state(store, "fork-1", {"raw": [], "fp": 2})
    assert sessions.session_ids(store) == [] and sessions.host_state(store, "fork-1") == {}
    assert sessions.host_session(store, "rotated-2") == "fork-1"
    sessions.bind_host_session(store, "rotated-2", "rotated-2")  # back to the default: no row
    assert sessions.host_session(store, "rotated-2") is None


def make_hermes_engine(home: Path) -> LcmContextEngine:
    engine = LcmContextEngine(LcmConfig.for_home(home, {"embeddings": "off"}))
    engine.update_model("fake-model", 20_000)
    return engine


def test_rotated_hermes_session_finds_its_lcm_session_after_a_restart(tmp_path: Path) -> None:
    first = make_hermes_engine(tmp_path)
    first.on_session_start("hermes-a")
    first.engine.sync(first.session_id, [SYSTEM, *turn(1)])
    # Hermes rotates its id at compaction; the engine keeps the LCM session.
    first.on_session_start("hermes-b", old_session_id="hermes-a")
    assert first.session_id == "hermes-a"
    first.engine.close()

    restarted = make_hermes_engine(tmp_path)  # a new gateway process: nothing in memory
    restarted.on_session_start("hermes-b")
    assert restarted.session_id == "hermes-a"
    history = [SYSTEM, *turn(1), *turn(2)]
    restarted._shared.store_turn(session_id="hermes-b", conversation_history=history)
    store = restarted.engine.store
    assert [c for _, c in stored(store, "hermes-a")] == [m["content"] for m in history[1:]]
    assert store.counts()["sessions"] == 1
    restarted.engine.close()


def test_turn_hook_of_an_unbound_session_creates_no_database(tmp_path: Path) -> None:
    # Registered but not selected (another context engine): Hermes never calls it.
    engine = LcmContextEngine(LcmConfig.for_home(tmp_path, {"embeddings": "off"}))
    engine._shared.store_turn(session_id="other-engine", conversation_history=turn(1))
    assert not (tmp_path / "lcm.db").exists()


def test_session_reloaded_with_extra_keys_is_not_stored_twice(engine: LcmEngine) -> None:
    first = [SYSTEM, *turn(1)]
    engine.sync("s", first)
    reloaded = [SYSTEM, *[as_reloaded(m) for m in turn(1)], *turn(2)]
    assert engine.sync("s", reloaded).ingested == 2
    assert len(stored(engine.store, "s")) == 4


def test_pre_compaction_transcript_is_not_stored_twice(engine: LcmEngine) -> None:
    history = [SYSTEM]
    for index in range(1, 7):
        history += turn(index, size=400)
    question = {"role": "user", "content": "question 7: what was said in turn 2?"}
    host = [*history, question]
    fitted, report = engine.compactions.fitted_context("s", 600, [SYSTEM])
    assert not report.summaries_created  # nothing stored yet: compaction comes with the sync
    engine.sync("s", host)
    fitted, report = engine.compactions.fitted_context("s", 600, [SYSTEM])
    assert report.summaries_created
    # Hermes' turn hook then hands the transcript it held before compacting, plus the reply.
    reply = {"role": "assistant", "content": "answer 7"}
    assert engine.sync("s", [*host, reply]).ingested == 1
    # The next turn is built on the compacted context: only the new turn is new.
    following = [*fitted, reply, *turn(8)]
    assert engine.sync("s", following).ingested == 2
    contents = [c for _, c in stored(engine.store, "s")]
    assert len(contents) == len(set(contents)) == 12 + 1 + 1 + 2


def test_repeated_text_after_a_compaction_is_still_stored(engine: LcmEngine) -> None:
    """Alignment by content must not swallow a new message equal to an old one."""
    host = [SYSTEM]
    for index in range(1, 5):
        host += [{"role": "user", "content": "ok " + "x" * 300}, *turn(index, size=300)[1:]]
    engine.sync("s", host)
    fitted, report = engine.compactions.fitted_context("s", 400, [SYSTEM])
    assert report.summaries_created
    again = [*fitted, {"role": "user", "content": "ok " + "x" * 300}]
    before = len(stored(engine.store, "s"))
    assert engine.sync("s", again).ingested == 1
    assert len(stored(engine.store, "s")) == before + 1


def test_latest_user_message_is_never_folded(engine: LcmEngine) -> None:
    history = []
    for index in range(1, 5):
        history += turn(index, size=600)
    question = {"role": "user", "content": "The newest question, verbatim. " + "words " * 200}
    engine.sync("s", [SYSTEM, *history, question])
    # A budget below the question itself: everything older is folded, the question stays.
    fitted, report = engine.compactions.fitted_context("s", 200, [SYSTEM])
    assert report.summaries_created
    assert fitted[-1] == question
    assert all(question["content"] not in str(m.get("content")) for m in fitted[:-1])


def test_a_tool_loop_over_budget_folds_its_groups_but_keeps_the_question(
    engine: LcmEngine,
) -> None:
    question = {"role": "user", "content": "Run the checks and tell me what failed."}
    loop: list[dict[str, Any]] = []
    for index in range(6):
        call_id = f"call_{index}"
        call = {
            "id": call_id,
            "type": "function",
            "function": {"name": "terminal", "arguments": "{}"},
        }
        loop += [
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": call_id, "content": f"check {index} " + "o" * 800},
        ]
    engine.sync("s", [SYSTEM, *turn(1, size=1200), question, *loop])
    fitted, report = engine.compactions.fitted_context("s", 900, [SYSTEM])
    assert report.summaries_created
    users = [m for m in fitted if m.get("role") == "user"]
    assert question in fitted, json.dumps(users)[:500]
    assert len(fitted) < len(loop)  # the loop's own groups were folded
    # The earlier turn's summary was not squeezed to nothing to make room for the loop.
    earlier = fitted[fitted.index(question) - 1]
    assert "[LCM summary" in earlier["content"] and len(earlier["content"]) > 800


def test_a_tail_message_merged_into_the_block_then_reloaded_apart_is_stored_once(
    engine: LcmEngine,
) -> None:
    """Hermes merges our summary block's user message with the user message after it; its
    API server, continuing the session from state.db, hands the two back apart. Seen with a
    compaction in every turn: the turn before was stored a second time."""
    history = [SYSTEM]
    for index in range(1, 7):
        history += turn(index, size=400)
    question = {"role": "user", "content": "question 7: what was said in turn 2?"}
    engine.sync("s", [*history, question])
    fitted, report = engine.compactions.fitted_context("s", 600, [SYSTEM])
    assert report.summaries_created and fitted[2]["role"] == "user"
    block, tail = fitted[1], fitted[2:]
    merged = {"role": "user", "content": f"{block['content']}\n\n{tail[0]['content']}"}
    reply = {"role": "assistant", "content": "answer 7"}
    engine.sync("s", [SYSTEM, merged, *tail[1:], reply])  # the turn hook, after the reply
    reloaded = [as_reloaded(m) for m in [block, *tail, reply]]
    engine.sync("s", [SYSTEM, *reloaded, *turn(8)])  # the next request, from state.db
    contents = [c for _, c in stored(engine.store, "s")]
    assert len(contents) == len(set(contents)) == 12 + 1 + 1 + 2
