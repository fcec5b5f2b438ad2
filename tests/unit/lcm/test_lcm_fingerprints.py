"""The per-turn fast paths of ``sync``: remembered fingerprints and the summary-header scan.

Hermes hands the whole live transcript to LCM every turn, so both run over
every message it holds, every turn. They must answer exactly what the slow
path answers: a wrong fingerprint stores a turn twice or never.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hermes_runtime.lcm.compact.assembly import summary_refs_in
from hermes_runtime.lcm.engine.hostsync import FingerprintMemo, _call_identity, _digest, fingerprint

MESSAGES: list[dict[str, Any]] = [
    {"role": "user", "content": "hello"},
    {"role": "user", "content": "  hello \n"},  # stripped text: the same message to a host
    {"role": "assistant", "content": "hello"},
    {"role": "tool", "content": "42", "tool_call_id": "call_1"},
    {"role": "tool", "content": "42", "tool_call_id": "call_2"},
    {"role": "tool", "content": "42", "tool_call_id": 7},  # not a string: never remembered
    {
        "role": "assistant",
        "content": "",
        "tool_calls": [{"id": "call_1", "function": {"name": "f", "arguments": "{}"}}],
    },
    {"role": "user", "content": [{"type": "text", "text": "parts"}]},
    {"role": "user", "content": "hello", "timestamp": 1.0, "finish_reason": "stop"},
]


def test_the_memo_answers_what_fingerprint_answers_first_and_second_time() -> None:
    memo = FingerprintMemo()
    for _ in range(2):
        for message in MESSAGES:
            assert memo.of(message) == fingerprint(message), message


def test_messages_that_differ_where_fingerprint_looks_get_different_prints() -> None:
    memo = FingerprintMemo()
    prints = {memo.of(m) for m in MESSAGES}
    expected = {fingerprint(m) for m in MESSAGES}
    assert prints == expected
    assert len(prints) == 7  # the stripped and the extra-keys copies equal the plain one


def test_a_message_edited_in_place_gets_its_new_print() -> None:
    memo = FingerprintMemo()
    message = {"role": "user", "content": "draft"}
    first = memo.of(message)
    message["content"] = "final"
    assert memo.of(message) == fingerprint({"role": "user", "content": "final"}) != first


def test_the_memo_stays_within_its_capacity_and_correct_past_it() -> None:
    memo = FingerprintMemo(capacity=8)
    messages = [{"role": "user", "content": f"m{i}"} for i in range(50)]
    for message in messages:
        memo.of(message)
    assert len(memo._prints) <= 8
    assert [memo.of(m) for m in messages] == [fingerprint(m) for m in messages]


def test_summary_headers_count_only_at_the_start_or_after_a_block_separator() -> None:
    header = "[LCM summary sum_{} | depth 0] text"
    block = "\n\n".join(header.format(i) for i in (3, 4))
    assert summary_refs_in({"role": "user", "content": block}) == [3, 4]
    quoted = "see " + header.format(5) + "\n" + header.format(6)
    assert summary_refs_in({"role": "user", "content": quoted}) == []
    assert summary_refs_in({"role": "assistant", "content": "x\n\n" + header.format(7)}) == [7]
    assert summary_refs_in({"role": "tool", "content": header.format(8)}) == []


def slow_fingerprint(message: dict[str, Any]) -> str:
    """``fingerprint`` through the generic JSON encoder only (what scheme 2 is defined by)."""
    content = message.get("content")
    calls = message.get("tool_calls")
    canonical = {
        "role": message.get("role"),
        "content": content.strip() if isinstance(content, str) else content,
        "tool_calls": [_call_identity(c) for c in calls] if isinstance(calls, list) else None,
        "tool_call_id": message.get("tool_call_id"),
    }
    return _digest(canonical)


texts = st.one_of(st.none(), st.text(), st.text(alphabet=st.characters(codec="utf-8")))


@given(content=texts, role=texts, call_id=texts, calls=st.sampled_from([None, "x", 3]))
def test_the_plain_message_print_is_the_generic_encoders_byte_for_byte(
    content: str | None, role: str | None, call_id: str | None, calls: Any
) -> None:
    message = {"role": role, "content": content, "tool_call_id": call_id, "tool_calls": calls}
    assert fingerprint(message) == slow_fingerprint(message)
    sparse = {k: v for k, v in message.items() if v is not None}  # absent keys read as None
    assert fingerprint(sparse) == slow_fingerprint(sparse)


def test_every_sample_message_prints_as_the_generic_encoder_does() -> None:
    odd = 'é " \u2028 \x00 \t \\ /'  # what JSON escapes, and what it does not
    for message in [*MESSAGES, {"role": "user", "content": odd}]:
        assert fingerprint(message) == slow_fingerprint(message), message
    lone = {"role": "user", "content": "\ud800"}  # a lone surrogate: both refuse it alike
    with pytest.raises(UnicodeEncodeError):
        slow_fingerprint(lone)
    with pytest.raises(UnicodeEncodeError):
        fingerprint(lone)
