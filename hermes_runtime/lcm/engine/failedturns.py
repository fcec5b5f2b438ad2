"""A turn the model never answered: kept in LCM, marked, and stored once across retries.

Why: a turn whose model calls all fail (provider refused, timed out, 429/5xx bursts, an
unreadable answer) reaches no ``post_llm_call`` hook, so LCM alone would keep no trace that
the user said anything, while Hermes' ``state.db`` has the message. So the host adapter
(``compat/turn_outcome.py``) hands the failed turn's transcript to the engine, which stores
it like any turn, with the failure recorded on the turn's user message under
``FAILED_KEY``: what the client was told, Hermes' error and reason, and when. A message
that was already stored before the model failed (a compaction or an LCM tool call in the
same turn) cannot be changed, so the failure then comes as an assistant message with the
text the client received, under the same key.

The key starts with ``_``: Hermes drops such keys from every message it sends to a
provider (its internal markers), so a failed turn handed back in an assembled context
reaches the model as the plain message it was. Expand returns the key; grep finds the text.

A retry must not store the turn twice. The host state remembers the failed turns' user
texts (``PENDING_KEY``) until something else is stored; the first new message of the next
sync drops its copies of them: Hermes' API server reloads the failed turn from ``state.db``
and merges it with the retry (``"X\\n\\nX"``, or ``"X\\n\\nY"`` when the user moved on:
``"Y"`` is kept), whatever their age (``replay.py``'s window is for cut turns, whose
failure nobody saw); a client that sends its own history re-sends ``X`` (aligned as already
stored) or ``X``, the failure text and ``X`` again (the failure text is in the host state's
prints, so the second ``X`` is the first new message, and dropped).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from hermes_runtime.lcm.records import message_text
from hermes_runtime.lcm.store.replay import SEPARATOR

FAILED_KEY = "_lcm_failed"
PENDING_KEY = "failed"  # in the session's host state: user texts of failed turns, in order
MAX_PENDING = 16  # consecutive failed turns remembered (older ones are stored already)


@dataclass(frozen=True)
class TurnFailure:
    """A failed turn's outcome: ``answer`` is the text the client received instead of an
    answer, ``error`` Hermes' summary of the last error, ``reason`` its classification."""

    answer: str
    error: str
    reason: str = ""
    at: float = 0.0

    @classmethod
    def from_result(cls, result: dict[str, Any]) -> TurnFailure:
        """The failure Hermes reported in a failed ``run_conversation`` result."""
        answer = result.get("final_response")
        error = result.get("error")
        return cls(
            answer=answer if isinstance(answer, str) else "",
            error=str(error) if error else "",
            reason=str(result.get("failure_reason") or ""),
            at=time.time(),
        )

    def marker(self) -> dict[str, Any]:
        return {"answer": self.answer, "error": self.error, "reason": self.reason, "at": self.at}

    def answer_message(self) -> dict[str, Any]:
        """The assistant message a client that keeps its own history may append."""
        return {"role": "assistant", "content": self.answer}


def pending_texts(state: dict[str, Any]) -> list[str]:
    """The user texts of the failed turns the host state remembers (oldest first)."""
    found = state.get(PENDING_KEY)
    return [t for t in found if isinstance(t, str)] if isinstance(found, list) else []


def _without_copies(text: str, pending: list[str]) -> str:
    """``text`` without the leading copies of failed turns Hermes merged into it."""
    rest = text.strip()
    changed = True
    while changed:
        changed = False
        for copy in pending:
            head = copy.strip() + SEPARATOR
            if copy.strip() and rest.startswith(head):
                rest, changed = rest[len(head) :].strip(), True
    return rest


def drop_failed_copies(
    fresh: list[dict[str, Any]], pending: list[str]
) -> tuple[list[dict[str, Any]], int]:
    """``fresh`` without its first message's copies of the pending failed turns; how many
    messages were folded (1 or 0). Only a user message with text content is looked at."""
    if not fresh or not pending:
        return fresh, 0
    first = fresh[0]
    content = first.get("content")
    if first.get("role") != "user" or not isinstance(content, str):
        return fresh, 0
    rest = _without_copies(content, pending)
    if rest in {p.strip() for p in pending}:
        return fresh[1:], 1  # the failed turn again: it is stored already
    if rest == content.strip():
        return fresh, 0
    return [{**first, "content": rest}, *fresh[1:]], 1


def last_user_index(messages: list[dict[str, Any]]) -> int | None:
    for index in range(len(messages) - 1, -1, -1):
        if messages[index].get("role") == "user":
            return index
    return None


def record_failure(
    fresh: list[dict[str, Any]],
    transcript: list[dict[str, Any]],
    pending: list[str],
    failure: TurnFailure,
) -> tuple[list[dict[str, Any]], list[str]]:
    """The messages to store for a failed turn, and the pending texts afterwards.

    The turn's user message is marked when it is among ``fresh``; when it was stored
    before, an assistant message with the client's failure text is added instead, unless
    this turn is already a pending failure (a retry that failed again adds nothing).
    """
    marker = failure.marker()
    index = last_user_index(fresh)
    if index is not None:
        marked = {**fresh[index], FAILED_KEY: marker}
        text = message_text(marked)
        return [*fresh[:index], marked, *fresh[index + 1 :]], _remember(pending, text)
    turn = last_user_index(transcript)
    text = message_text(transcript[turn]) if turn is not None else ""
    if not fresh and text and _without_copies(text, pending) in {p.strip() for p in pending}:
        return fresh, pending
    return [*fresh, {**failure.answer_message(), FAILED_KEY: marker}], _remember(pending, text)


def _remember(pending: list[str], text: str) -> list[str]:
    return [*pending, text][-MAX_PENDING:] if text else pending


def with_pending(
    state: dict[str, Any], pending: list[str], answer_print: str | None
) -> dict[str, Any]:
    """The host state with the pending failed turns, and, after a failed turn, the print
    of the failure text appended to what the host may hold (``answer_print``)."""
    updated = {k: v for k, v in state.items() if k != PENDING_KEY}
    if pending:
        updated[PENDING_KEY] = pending
    if answer_print is not None:
        updated["raw"] = [*state.get("raw", []), answer_print]
    return updated


def settle(
    saved: dict[str, Any],
    state: dict[str, Any],
    fresh: list[dict[str, Any]],
    transcript: list[dict[str, Any]],
    failure: TurnFailure | None,
    print_of: Callable[[dict[str, Any]], str],
) -> tuple[list[dict[str, Any]], dict[str, Any], int]:
    """What one sync stores and the host state it saves, failed turns taken into account.

    ``saved``: the session's host state before the sync (of the current print scheme),
    ``state``: the one the sync computed, ``fresh``: the host's new messages, ``transcript``:
    the host's whole list, ``print_of``: the engine's fingerprint. Copies of a pending
    failed turn are dropped; a ``failure`` is recorded. Returns the messages, the state and
    how many messages were folded.
    """
    pending = pending_texts(saved)
    fresh, folded = drop_failed_copies(fresh, pending)
    if failure is None:
        if fresh:  # something after the failed turns is stored: they are settled
            pending = []
        return fresh, with_pending(state, pending, None), folded
    fresh, pending = record_failure(fresh, transcript, pending, failure)
    return fresh, with_pending(state, pending, print_of(failure.answer_message())), folded
