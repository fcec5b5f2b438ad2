"""Recognise a user turn replayed by a client's retry, so LCM stores it once.

Why LCM does this and not Hermes: Hermes' API server writes the user message to state.db before
the model call, and its only dedupe for retries (``Idempotency-Key``, made durable by
``hermes_runtime.agent.idempotency``) keeps answers, so it has nothing for a turn the gateway
was killed in the middle of (docs/retries.md). The client then retries the same text and
Hermes sees two user turns in a row. Two shapes reach LCM:

- merged: Hermes joins adjacent user messages with a blank line, so the retried turn arrives
  as ``"X\\n\\nX"``. The merged dict is the stored copy's (it carries state.db's ``timestamp``,
  a fresh message from a request has none), so the age of the first copy is known;
- repeated: LCM had already stored the cut turn (a sync ran before the model call, e.g. a
  compaction), and the retry arrives as a new user message with the same text.

Either counts as a replay only within ``window`` seconds of the first copy and only while no
reply came between: a user who sends the same text again after an answer gets two turns.

A third shape comes from a full data volume: Hermes stored the user message in
state.db but not its reply, while LCM kept both (it holds what the volume refuses until
there is room). The next turn then reaches LCM as ``"X\n\nY"``, the answered turn X merged
into the new one Y, and storing it whole put X in LCM twice. ``answered_head`` finds it: the
session's newest user message X, answered since and at most ``window`` seconds old, heads the
new user message; Y alone is stored.
"""

from __future__ import annotations

from typing import Any

from hermes_runtime.lcm.records import message_tokens

SEPARATOR = "\n\n"  # what Hermes puts between merged user messages


def repeated_unit(text: str) -> str | None:
    """The text ``text`` repeats (``"X\\n\\nX"`` -> ``"X"``), or None if it is no repetition."""
    parts = text.split(SEPARATOR)
    count = len(parts)
    for width in range(1, count // 2 + 1):
        if count % width:
            continue
        unit = SEPARATOR.join(parts[:width]).strip()
        copies = (SEPARATOR.join(parts[i : i + width]).strip() for i in range(width, count, width))
        if unit and all(copy == unit for copy in copies):
            return unit
    return None


def collapse_merged_replay(message: dict[str, Any], now: float, window: float) -> dict[str, Any]:
    """The message with a merged replay of one user text reduced to that text once.

    Only a user message whose ``timestamp`` (the first copy's, from state.db) is at most
    ``window`` seconds old; anything else comes back unchanged.
    """
    content, stamp = message.get("content"), message.get("timestamp")
    if window <= 0 or message.get("role") != "user" or not isinstance(content, str):
        return message
    if not isinstance(stamp, int | float) or not 0 <= now - stamp <= window:
        return message
    unit = repeated_unit(content)
    return message if unit is None else {**message, "content": unit}


def answered_head(
    role: str,
    content: str | None,
    last: tuple[str, str | None, float] | None,
    asked: tuple[str | None, float] | None,
    now: float,
    window: float,
) -> str | None:
    """What follows an answered user turn the host merged into this user message, or None.

    ``last``: the session's newest stored message (role, content, stored at); ``asked``: its
    newest user message (content, stored at). Only when a reply came after ``asked`` (a turn
    without one is a retry: ``is_repeated_turn``, ``collapse_merged_replay``) and ``asked`` is
    at most ``window`` seconds old.
    """
    if window <= 0 or role != "user" or content is None or last is None or asked is None:
        return None
    text, stored_at = asked
    if last[0] == "user" or not text or not 0 <= now - stored_at <= window:
        return None
    head = text + SEPARATOR
    rest = content[len(head) :] if content.startswith(head) else ""
    return rest if rest.strip() else None


def without_answered_turn(
    row: dict[str, Any],
    last: tuple[str, str | None, float] | None,
    asked: tuple[str | None, float] | None,
    now: float,
    window: float,
) -> dict[str, Any]:
    """A prepared row (``LcmStore._prepare``) without the answered turn the host merged into
    it (``answered_head``): a new dict, its tokens counted again; else the row itself."""
    rest = answered_head(row["role"], row["content"], last, asked, now, window)
    if rest is None:
        return row
    tokens = message_tokens({"role": "user", "content": rest})
    return {**row, "content": rest, "token_count": tokens}


def is_repeated_turn(
    last: tuple[str, str | None, float] | None,
    role: str,
    content: str | None,
    now: float,
    window: float,
) -> bool:
    """Whether a user message repeats ``last`` (role, content, stored at) within ``window``.

    ``last`` is the session's newest stored message: a user message means no reply came
    after it, so the same text again is the retry of that turn.
    """
    if window <= 0 or last is None or role != "user" or content is None:
        return False
    last_role, last_content, stored_at = last
    same = last_content is not None and last_content.strip() == content.strip()
    return last_role == "user" and same and now - stored_at <= window
