"""A user turn replayed by a client's retry is stored once (docs/retries.md).

Real SQLite through ``LcmEngine.sync``, with the transcripts Hermes hands LCM after a cut
request was retried: the stored copy merged with the retry (``"X\\n\\nX"``, carrying state.db's
``timestamp``), or the retry as a second user message after LCM had stored the first.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from hermes_runtime.common.errors import RuntimeFailure
from hermes_runtime.lcm.config import LcmConfig
from hermes_runtime.lcm.engine.lcmengine import LcmEngine
from hermes_runtime.lcm.store.replay import answered_head, repeated_unit

SESSION = "retries"
OPENING = [
    {"role": "user", "content": "hello"},
    {"role": "assistant", "content": "Echo: hello"},
]


def user_texts(engine: LcmEngine) -> list[str]:
    rows = engine.store.conn.execute(
        "SELECT content FROM messages WHERE session_id = ? AND role = 'user' ORDER BY seq",
        (SESSION,),
    )
    return [str(row[0]) for row in rows]


def merged(text: str, age: float, copies: int = 2) -> dict[str, Any]:
    """The retried turn as Hermes hands it: the stored copy (with its state.db timestamp)."""
    return {"role": "user", "content": "\n\n".join([text] * copies), "timestamp": time.time() - age}


def test_a_merged_replay_within_the_window_is_stored_once(engine: LcmEngine) -> None:
    engine.sync(SESSION, OPENING)
    engine.sync(
        SESSION, [*OPENING, merged("turn 7", age=3), {"role": "assistant", "content": "ok"}]
    )
    assert user_texts(engine) == ["hello", "turn 7"]
    # A retry cut twice arrives as three copies.
    engine.sync(SESSION, [*OPENING, merged("turn 8", age=3, copies=3)])
    assert user_texts(engine) == ["hello", "turn 7", "turn 8"]


def test_a_merged_text_older_than_the_window_or_without_timestamp_is_kept(
    engine: LcmEngine,
) -> None:
    engine.sync(SESSION, OPENING)
    old = merged("again", age=engine.config.replay_window_seconds + 30)
    engine.sync(SESSION, [*OPENING, old, {"role": "assistant", "content": "a"}])
    typed = {"role": "user", "content": "twice\n\ntwice"}  # a fresh request's own text
    engine.sync(SESSION, [*OPENING, old, {"role": "assistant", "content": "a"}, typed])
    assert user_texts(engine) == ["hello", "again\n\nagain", "twice\n\ntwice"]


def test_the_retry_of_a_stored_unanswered_turn_is_not_stored_again(engine: LcmEngine) -> None:
    engine.sync(SESSION, [*OPENING, {"role": "user", "content": "cut turn"}])  # no reply yet
    retried = [*OPENING, merged("cut turn", age=2), {"role": "assistant", "content": "done"}]
    engine.sync(SESSION, retried)
    assert user_texts(engine) == ["hello", "cut turn"]
    roles = engine.store.conn.execute(
        "SELECT role FROM messages WHERE session_id = ? ORDER BY seq", (SESSION,)
    )
    assert [r[0] for r in roles] == ["user", "assistant", "user", "assistant"]


def test_the_same_text_after_a_reply_is_a_new_turn(engine: LcmEngine) -> None:
    asked = [{"role": "user", "content": "continue"}]
    engine.sync(SESSION, asked)
    answered = [*asked, {"role": "assistant", "content": "more"}]
    engine.sync(SESSION, answered)
    engine.sync(SESSION, [*answered, *asked])
    assert user_texts(engine) == ["continue", "continue"]


def test_a_repeat_after_the_window_is_a_new_turn(engine: LcmEngine) -> None:
    engine.store.ingest(SESSION, {"role": "user", "content": "ping"}, created_at=time.time() - 600)
    engine.sync(SESSION, [{"role": "user", "content": "ping"}])
    assert user_texts(engine) == ["ping", "ping"]


def test_an_import_keeps_every_row(engine: LcmEngine) -> None:
    """``ingest`` (imports, the day-one archive) is lossless: no replay folding there."""
    twice = [{"role": "user", "content": "same"}, merged("same", age=1)]
    assert engine.ingest(SESSION, [*twice, {"role": "user", "content": "same"}]) == 3
    assert user_texts(engine) == ["same", "same\n\nsame", "same"]


def test_window_zero_turns_the_dedupe_off(tmp_path: Path) -> None:
    config = LcmConfig.for_home(tmp_path, {"embeddings": "off", "replay_window_seconds": 0})
    engine = LcmEngine(config)
    try:
        engine.sync(SESSION, [{"role": "user", "content": "x"}])
        engine.sync(SESSION, [merged("x", age=1), {"role": "assistant", "content": "y"}])
        assert user_texts(engine) == ["x", "x\n\nx"]
    finally:
        engine.close()


def test_a_negative_window_is_refused_naming_the_setting(tmp_path: Path) -> None:
    with pytest.raises(RuntimeFailure, match=r"lcm\.replay_window_seconds"):
        LcmConfig.for_home(tmp_path, {"replay_window_seconds": -1})


@pytest.mark.parametrize(
    ("text", "unit"),
    [
        ("a\n\na", "a"),
        ("a\n\nb\n\na\n\nb", "a\n\nb"),
        ("a\n\na\n\na", "a"),
        ("a\n\nb", None),
        ("a", None),
        ("a\n\na\n\nb", None),
        ("\n\n", None),
    ],
)
def test_repeated_unit(text: str, unit: str | None) -> None:
    assert repeated_unit(text) == unit


ANSWERED = ("assistant", "Echo: X", 100.0)


@pytest.mark.parametrize(
    ("content", "last", "asked", "now", "rest"),
    [
        ("X\n\nY", ANSWERED, ("X", 99.0), 110.0, "Y"),  # the answered turn merged in: Y
        ("X\n\nY", ANSWERED, ("X", 99.0), 500.0, None),  # older than the window: as sent
        ("X\n\nY", ("user", "X", 99.0), ("X", 99.0), 110.0, None),  # no reply: a retry
        ("X\n\n", ANSWERED, ("X", 99.0), 110.0, None),  # nothing after it
        ("XZ\n\nY", ANSWERED, ("X", 99.0), 110.0, None),  # another text
        ("Y", ANSWERED, ("X", 99.0), 110.0, None),
        ("X\n\nY", None, None, 110.0, None),  # a new session
    ],
)
def test_an_answered_turn_merged_into_the_next_is_found_only_in_its_shape(
    content: str,
    last: tuple[str, str, float] | None,
    asked: tuple[str, float] | None,
    now: float,
    rest: str | None,
) -> None:
    """A full volume lost Hermes' reply but not LCM's (issue 30): the next user message
    carries the answered turn ahead of the new one; only that shape, within the window."""
    assert answered_head("user", content, last, asked, now, 120.0) == rest
    assert answered_head("user", content, last, asked, now, 0.0) is None  # the window off
