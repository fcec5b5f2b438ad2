"""Turn a session's context items into a valid OpenAI message list.

Raw messages come back exactly as ingested (externalized ones as their
stub), so the provider's prompt cache keeps hitting; a run of summaries
becomes one ``user`` message in which each summary's header names its id,
depth, span and how to expand it.
"""

from __future__ import annotations

import json
import re
from itertools import repeat
from operator import add, floordiv
from typing import Any

from hermes_runtime.common.errors import RuntimeFailure
from hermes_runtime.lcm.records import ContextItem, Summary, message_tokens
from hermes_runtime.lcm.store import dag, sessions
from hermes_runtime.lcm.store.lcmstore import LcmStore

SUMMARY_MARKER = "[LCM summary "


def summary_text(summary: Summary) -> str:
    header = (
        f"{SUMMARY_MARKER}{summary.ref} | depth {summary.depth} | {summary.message_count} "
        f"messages, seq {summary.first_seq}-{summary.last_seq} | "
        f'expand with lcm_expand(id="{summary.ref}")]'
    )
    return f"{header}\n{summary.content}"


def render_block(summaries: list[Summary]) -> dict[str, Any]:
    """Consecutive summaries become ONE user message.

    Hosts merge consecutive same-role messages (Hermes does); one block per
    run keeps what the host holds identical to what we rendered.
    """
    return {"role": "user", "content": BLOCK_SEPARATOR.join(summary_text(s) for s in summaries)}


BLOCK_SEPARATOR = "\n\n"
# A header starts the message or follows a block separator. The separator is checked
# by hand: a pattern starting with an alternation cannot use the regex engine's fast
# literal search, and a block of summaries is scanned on every turn.
SUMMARY_REF = re.compile(r"\[LCM summary (sum_(\d+)) \| depth ")


def summary_refs_in(message: dict[str, Any]) -> list[int]:
    """Summary ids whose header appears in a message (the host may have merged blocks)."""
    content = message.get("content")
    if message.get("role") not in ("user", "assistant") or not isinstance(content, str):
        return []
    if "[LCM summary " not in content:  # the common case, without the regex's scan
        return []
    return [
        int(m.group(2))
        for m in SUMMARY_REF.finditer(content)
        if m.start() == 0 or content.startswith(BLOCK_SEPARATOR, m.start() - 2)
    ]


def summary_refs_of(store: LcmStore, message: dict[str, Any]) -> list[str] | None:
    """The summary ids when ``message`` is exactly our rendering of a block, else None.

    A user can type anything, including our header; only an exact match
    with stored summaries' rendering counts as ours.
    """
    ids = summary_refs_in(message)
    summaries = [dag.summary(store, i) for i in ids]
    if not ids or any(s is None for s in summaries):
        return None
    found = [s for s in summaries if s is not None]
    if render_block(found) != message:
        return None
    return [s.ref for s in found]


def render_items(items: list[ContextItem]) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = []
    run: list[Summary] = []
    for item in items:
        if item.summary is not None:
            run.append(item.summary)
            continue
        if run:
            messages.append(render_block(run))
            run = []
        assert item.message is not None
        messages.append(item.message.to_openai())
    if run:
        messages.append(render_block(run))
    return messages


def assemble(
    store: LcmStore, session_id: str, items: list[ContextItem] | None = None
) -> list[dict[str, Any]]:
    """The live context of ``session_id`` as OpenAI messages (repaired if ever invalid).

    ``items``: the context a compaction just left (``CompactionReport.items``),
    so a compress reads the session's context once, not three times.
    """
    if items is None:
        items = dag.context_items(store, session_id)
    return repair(render_items(items))


def newest_within(
    store: LcmStore, session_id: str, budget: int
) -> tuple[list[dict[str, Any]], int]:
    """The newest context items that fit ``budget`` tokens, and how many older ones did not.

    Read-only: what a viewer of a stored session gets without compacting it.
    """
    items = dag.context_items(store, session_id)
    kept, used = 0, 0
    for item in reversed(items):
        if used + item.tokens > budget:
            break
        used += item.tokens
        kept += 1
    messages = repair(render_items(items[len(items) - kept :]))
    while kept and count_tokens(messages) > budget:  # estimates can miss a header's cost
        kept -= 1
        messages = repair(render_items(items[len(items) - kept :]))
    return messages, len(items) - kept


def context_within(store: LcmStore, session_id: str, budget: int) -> dict[str, Any]:
    """A session's stored context cut to ``budget`` tokens, newest first; nothing is written.

    Compaction belongs to the agent (and ``import``): a read verb shows what
    is stored. Items that do not fit are counted in ``omitted_items``.
    """
    if not sessions.has_session(store, session_id):
        raise RuntimeFailure(f"--session {session_id}: not in {store.db_path}")
    messages, omitted = newest_within(store, session_id, budget)
    return {
        "session": session_id,
        "budget": budget,
        "tokens": count_tokens(messages),
        "omitted_items": omitted,
        "messages": messages,
    }


def count_tokens(messages: list[dict[str, Any]]) -> int:
    """``message_tokens`` summed; plain transcripts at C speed.

    It runs over the whole live transcript on every turn (the host's
    preflight check) and at every compaction. When every message is a dict
    with a string content and no tool calls, each counts ``4 + ceil(len / 4)``,
    which ``map`` computes without a Python call per message; anything else
    goes through ``message_tokens``.
    """
    try:
        contents: list[Any] = list(map(dict.get, messages, repeat("content")))
        calls = any(map(dict.get, messages, repeat("tool_calls")))
    except TypeError:  # a message that is not a dict
        return sum(map(message_tokens, messages))
    if calls or not set(map(type, contents)) <= {str}:
        return sum(map(message_tokens, messages))
    ceilings = map(floordiv, map(add, map(len, contents), repeat(3)), repeat(4))
    return 4 * len(contents) + sum(ceilings)


def validation_errors(messages: list[dict[str, Any]]) -> list[str]:
    """Why a list would be rejected by an OpenAI-compatible API (empty list = valid).

    Rules: every tool message answers a call id of the assistant message just
    before its run of tool messages; every call of an assistant message is
    answered before the next non-tool message.
    """
    errors: list[str] = []
    pending: set[str] = set()
    for index, message in enumerate(messages):
        role = message.get("role")
        if role not in ("system", "user", "assistant", "tool", "developer"):
            errors.append(f"message {index}: unknown role {role!r}")
        if role == "tool":
            call_id = message.get("tool_call_id")
            if call_id not in pending:
                errors.append(f"message {index}: tool result {call_id!r} without a pending call")
            pending.discard(call_id)
            continue
        if pending:
            errors.append(f"message {index}: calls {sorted(pending)} left without results")
            pending = set()
        if role == "assistant" and message.get("tool_calls"):
            pending = {str(c.get("id")) for c in message["tool_calls"] if isinstance(c, dict)}
    if pending:
        errors.append(f"end of list: calls {sorted(pending)} left without results")
    return errors


def repair(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Last-resort guard: drop what would make the list invalid.

    Compaction never splits a call from its results, so this only acts on
    histories that were already broken when ingested (e.g. an interrupted
    turn); dropped items stay in the database and searchable.
    """
    if not validation_errors(messages):
        return messages
    fixed: list[dict[str, Any]] = []
    index = 0
    while index < len(messages):
        message = messages[index]
        if message.get("role") == "tool":
            index += 1  # orphan tool result
            continue
        if message.get("role") == "assistant" and message.get("tool_calls"):
            wanted = {str(c.get("id")) for c in message["tool_calls"] if isinstance(c, dict)}
            run_end = index + 1
            while run_end < len(messages) and messages[run_end].get("role") == "tool":
                run_end += 1
            results = [m for m in messages[index + 1 : run_end] if m.get("tool_call_id") in wanted]
            answered = {str(m.get("tool_call_id")) for m in results}
            if answered == wanted:
                fixed.append(message)
                fixed.extend(results)
            else:
                fixed.append(_without_calls(message))
            index = run_end
            continue
        fixed.append(message)
        index += 1
    return fixed


def _without_calls(message: dict[str, Any]) -> dict[str, Any]:
    calls = json.dumps(message.get("tool_calls"), ensure_ascii=False)[:500]
    copy = {k: v for k, v in message.items() if k != "tool_calls"}
    copy["content"] = (message.get("content") or "") + f"\n[unanswered tool calls: {calls}]"
    return copy
