"""A turn the model never answered is kept, marked failed, and stored once across retries.

Real SQLite through ``LcmEngine.sync_bounded`` with the transcripts Hermes hands over: the
failed turn (``compat/turn_outcome.py``), then the retry as Hermes' API server builds it
(the stored copy merged with the retry, ``"X\\n\\nX"``) or as a client that keeps its own
history sends it (``X``, the failure text, ``X`` again). The gateway tests
(tests/integration/lcm/test_lcm_failed_turns.py) drive the same through real Hermes.
"""

from __future__ import annotations

import json
from typing import Any

from hermes_runtime.lcm.engine.failedturns import FAILED_KEY, TurnFailure
from hermes_runtime.lcm.engine.lcmengine import LcmEngine

SESSION = "failed-turns"
OPENING = [
    {"role": "user", "content": "hello"},
    {"role": "assistant", "content": "Echo: hello"},
]
FAILURE = TurnFailure("API call failed after 3 retries: HTTP 500", "HTTP 500", "server_error")
WAIT = 5.0


def stored(engine: LcmEngine) -> list[tuple[str, str, dict[str, Any]]]:
    rows = engine.store.conn.execute(
        "SELECT role, content, extra FROM messages WHERE session_id = ? ORDER BY seq",
        (SESSION,),
    )
    return [(str(r[0]), str(r[1]), json.loads(r[2]) if r[2] else {}) for r in rows]


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


def answer(text: str) -> dict[str, Any]:
    return {"role": "assistant", "content": text}


def fail(engine: LcmEngine, transcript: list[dict[str, Any]]) -> None:
    assert engine.sync_bounded(SESSION, transcript, WAIT, FAILURE) is not None


def test_the_failed_turn_is_stored_marked_and_a_merged_retry_is_not_stored_again(
    engine: LcmEngine,
) -> None:
    engine.sync(SESSION, OPENING)
    fail(engine, [*OPENING, user("X")])
    rows = stored(engine)
    assert [(role, text) for role, text, _ in rows][-1] == ("user", "X")
    assert rows[-1][2][FAILED_KEY]["answer"] == FAILURE.answer
    assert rows[-1][2][FAILED_KEY]["reason"] == "server_error"
    # The retry fails again: Hermes' API server merged the stored copy with it.
    fail(engine, [*OPENING, user("X\n\nX")])
    # The provider is back: the retry is answered.
    engine.sync(SESSION, [*OPENING, user("X\n\nX\n\nX"), answer("Echo: X")])
    assert [(role, text) for role, text, _ in stored(engine)] == [
        ("user", "hello"),
        ("assistant", "Echo: hello"),
        ("user", "X"),
        ("assistant", "Echo: X"),
    ]


def test_a_client_with_its_own_history_retries_once(engine: LcmEngine) -> None:
    engine.sync(SESSION, OPENING)
    fail(engine, [*OPENING, user("X")])
    engine.sync(SESSION, [*OPENING, user("X"), answer(FAILURE.answer), user("X"), answer("ok")])
    assert [text for role, text, _ in stored(engine) if role == "user"] == ["hello", "X"]
    assert stored(engine)[-1][:2] == ("assistant", "ok")


def test_a_user_who_moved_on_keeps_the_new_text(engine: LcmEngine) -> None:
    engine.sync(SESSION, OPENING)
    fail(engine, [*OPENING, user("X")])
    engine.sync(SESSION, [*OPENING, user("X\n\nY"), answer("Echo: Y")])
    assert [text for role, text, _ in stored(engine) if role == "user"] == ["hello", "X", "Y"]


def test_a_turn_stored_before_its_model_failed_gets_the_failure_as_an_answer(
    engine: LcmEngine,
) -> None:
    engine.sync(SESSION, [*OPENING, user("X")])  # e.g. a compaction at the turn's start
    fail(engine, [*OPENING, user("X")])
    role, text, extra = stored(engine)[-1]
    assert (role, text, extra[FAILED_KEY]["error"]) == ("assistant", FAILURE.answer, "HTTP 500")
    assert [text for role, text, _ in stored(engine) if role == "user"] == ["hello", "X"]


def test_the_same_text_after_an_answer_is_a_new_turn(engine: LcmEngine) -> None:
    engine.sync(SESSION, OPENING)
    fail(engine, [*OPENING, user("X")])
    engine.sync(SESSION, [*OPENING, user("X\n\nY"), answer("Echo: Y")])
    later = [*OPENING, user("X\n\nY"), answer("Echo: Y"), user("X"), answer("Echo: X")]
    engine.sync(SESSION, later)
    assert [text for role, text, _ in stored(engine) if role == "user"] == [
        "hello",
        "X",
        "Y",
        "X",
    ]
