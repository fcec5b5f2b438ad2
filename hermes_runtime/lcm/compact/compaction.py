"""Fold the oldest context into summaries until the context fits its budget.

Work per compaction is bounded by the live context (a few hundred items),
never by the history: the planner reads ``context_items`` only. Each step
either removes at least one context item or halves a summary's tokens, and
the last rung of the ladder shrinks the fresh tail, so the loop always ends
under budget (given a budget above the pinned system messages).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field

from hermes_runtime.lcm.compact.policy import CompactionPolicy
from hermes_runtime.lcm.compact.summarize import Summarizer, summarize_with_escalation
from hermes_runtime.lcm.records import (
    SUMMARY_HEADER_TOKENS,
    ContextItem,
    Summary,
    estimate_tokens,
)
from hermes_runtime.lcm.store import dag
from hermes_runtime.lcm.store.dag import NewSummary
from hermes_runtime.lcm.store.lcmstore import LcmStore


@dataclass
class CompactionReport:
    session_id: str
    tokens_before: int
    tokens_after: int
    budget: int
    summaries_created: list[str] = field(default_factory=list)
    levels: list[int] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    seconds: float = 0.0
    # The live context as the compaction left it: the caller assembles from it
    # instead of reading the session's context items again.
    items: list[ContextItem] = field(default_factory=list, repr=False)

    @property
    def fits(self) -> bool:
        return self.tokens_after <= self.budget


def group_bounds(items: list[ContextItem]) -> list[int]:
    """Indexes where a new atomic group starts.

    An assistant message with tool calls and the tool results that follow it
    form one group: cutting inside it would leave a tool result without its
    call (or a call without results), which providers reject.
    """
    starts: list[int] = []
    for index, item in enumerate(items):
        message = item.message
        if message is not None and message.role == "tool" and index > 0 and starts:
            prev = items[index - 1].message
            if prev is not None and (prev.role == "tool" or prev.tool_calls):
                continue
        starts.append(index)
    return starts


def pinned_head(items: list[ContextItem]) -> int:
    """Leading system messages stay verbatim: they are the agent's instructions."""
    count = 0
    for item in items:
        if item.message is not None and item.message.role == "system":
            count += 1
        else:
            break
    return count


def open_group_start(items: list[ContextItem]) -> int:
    """Index of a trailing assistant message whose tool calls are not all answered yet.

    Such a group is still being written by the host (results arrive one by
    one); folding it would orphan the results that come later.
    """
    for index in range(len(items) - 1, -1, -1):
        message = items[index].message
        if message is None or message.role == "tool":
            continue
        if message.role == "assistant" and message.tool_calls:
            wanted = {c.get("id") for c in json.loads(message.tool_calls) if isinstance(c, dict)}
            answered = {
                m.tool_call_id
                for i in items[index + 1 :]
                if (m := i.message) is not None and m.role == "tool"
            }
            return index if not wanted <= answered else len(items)
        return len(items)
    return len(items)


def latest_user_turn_start(items: list[ContextItem]) -> int:
    """Index of the newest user message: the turn the model is about to answer.

    It must reach the model verbatim (as its stub when it was externalized),
    never folded into a summary: the host would answer a summary instead of
    the question. Compaction first folds everything older; when the turn
    itself is still over budget, only its tool groups are folded. Its size
    is bounded by ``externalize_chars``, so the context stays bounded.
    """
    for index in range(len(items) - 1, -1, -1):
        message = items[index].message
        if message is not None and message.role == "user":
            return index
    return len(items)


def tail_start(items: list[ContextItem], starts: list[int], keep: int) -> int:
    """Index of the first item of the fresh tail (group-aligned, ``keep`` items or more)."""
    if keep <= 0:
        return len(items)
    boundary = max(0, len(items) - keep)
    candidates = [s for s in starts if s <= boundary]
    return candidates[-1] if candidates else 0


def item_text(store: LcmStore, item: ContextItem) -> str:
    """The text a summarizer sees for one item (stubs, not megabytes, for outputs)."""
    if item.summary is not None:
        return f"[{item.summary.ref}] {item.summary.content}"
    message = item.message
    assert message is not None
    parts = [f"[{message.ref} {message.role}]"]
    body = message.content if message.content is not None else message.content_json
    if body:
        parts.append(body)
    if message.tool_calls:
        calls = json.loads(message.tool_calls)
        parts.append(
            "calls: "
            + ", ".join(
                f"{c.get('function', {}).get('name')}({c.get('function', {}).get('arguments', '')})"
                for c in calls
                if isinstance(c, dict)
            )
        )
    return " ".join(parts)


@dataclass
class Step:
    start: int
    end: int  # exclusive
    depth: int
    target: int


def _condense_step(
    items: list[ContextItem], head: int, tail: int, policy: CompactionPolicy
) -> Step | None:
    index = head
    while index < tail:
        summary = items[index].summary
        if summary is None:
            index += 1
            continue
        run_end = index
        while (
            run_end < tail
            and items[run_end].summary is not None
            and items[run_end].summary.depth == summary.depth  # type: ignore[union-attr]
        ):
            run_end += 1
        if run_end - index >= policy.condense_fanout:
            end = index + policy.condense_fanout
            return Step(index, end, summary.depth + 1, policy.condense_target_tokens)
        index = run_end
    return None


def _leaf_step(
    items: list[ContextItem], head: int, tail: int, policy: CompactionPolicy
) -> Step | None:
    starts = [s for s in group_bounds(items) if head <= s <= tail] + [tail]
    first = next((i for i in range(head, tail) if items[i].message is not None), None)
    if first is None:
        return None
    start = max(s for s in starts if s <= first) if any(s <= first for s in starts) else first
    tokens, end = 0, start
    for boundary in starts:
        if boundary <= start:
            continue
        if any(items[i].summary is not None for i in range(end, boundary)):
            break
        chunk = sum(items[i].tokens for i in range(end, boundary))
        if tokens and tokens + chunk > policy.leaf_chunk_tokens:
            break
        tokens, end = tokens + chunk, boundary
    if end <= start:
        return None
    return Step(start, end, 0, policy.leaf_target_tokens)


def _forced_step(
    items: list[ContextItem], head: int, tail: int, policy: CompactionPolicy
) -> Step | None:
    """Over budget with nothing due: fold everything before the tail into one summary."""
    if tail - head < 2:
        return None
    depth = max((i.summary.depth for i in items[head:tail] if i.summary), default=-1) + 1
    return Step(head, tail, depth, policy.condense_target_tokens)


def _shrink_step(items: list[ContextItem], head: int, tail: int) -> Step | None:
    """The last rung: one item left before the tail and still too big; halve it."""
    if tail - head != 1 or items[head].tokens <= SUMMARY_HEADER_TOKENS + 16:
        return None
    summary = items[head].summary
    depth = summary.depth + 1 if summary is not None else 0
    return Step(head, tail, depth, max(8, (items[head].tokens - SUMMARY_HEADER_TOKENS) // 2))


def compact(
    store: LcmStore,
    session_id: str,
    budget: int,
    summarizer: Summarizer | None,
    policy: CompactionPolicy,
    *,
    extra_tokens: int = 0,
    force: bool = False,
    focus: str = "",
) -> CompactionReport:
    """Compact ``session_id`` until its context plus ``extra_tokens`` fits ``budget``.

    ``force`` (a manual ``/compress``) folds every raw message outside the fresh
    tail even when the context already fits. ``focus`` (``/compress <topic>``)
    steers the summaries this compaction writes toward that topic.
    """
    started = time.monotonic()
    deadline = started + policy.deadline_seconds
    items = dag.context_items(store, session_id)
    report = CompactionReport(session_id, _total(items) + extra_tokens, 0, budget)
    keep = policy.fresh_tail_messages
    whole_turn_kept = True  # phase 1: fold only what precedes the newest user message
    for _ in range(10_000):
        total = _total(items) + extra_tokens
        head = pinned_head(items)
        tail = min(tail_start(items, group_bounds(items), keep), open_group_start(items))
        latest_user = latest_user_turn_start(items)
        if whole_turn_kept:
            tail = min(tail, latest_user)
        elif latest_user < len(items):
            # phase 2: the current turn alone is over budget (a long tool loop):
            # fold its tool groups, never the user message that started it
            head = max(head, latest_user + 1)
        tail = max(head, tail)
        step = _condense_step(items, head, tail, policy)
        if step is None and (total > budget or force):
            step = _leaf_step(items, head, tail, policy)
        if step is None and total > budget:
            step = _forced_step(items, head, tail, policy)
        if step is None and total > budget and keep > 0:
            keep -= 1  # let the fresh tail shrink before squeezing summaries further
            continue
        if step is None and total > budget and _shrinking_can_fit(items, head, tail, total, budget):
            step = _shrink_step(items, head, tail)
        if step is None and total > budget and whole_turn_kept:
            whole_turn_kept = False
            continue
        if step is None:
            break
        run = items[step.start : step.end]
        target = _bounded_target(run, step.target)
        text = "\n".join(item_text(store, item) for item in run)
        result = summarize_with_escalation(
            summarizer, text, target, deadline, policy.call_timeout_seconds, focus
        )
        new = NewSummary(
            depth=step.depth,
            content=result.content,
            token_count=estimate_tokens(result.content),
            source_tokens=sum(i.tokens for i in run),
            level=result.level,
            sources=[_source_of(i) for i in run],
        )
        created = dag.replace_run(store, session_id, [i.position for i in run], new)
        if created is not None:
            report.summaries_created.append(created.ref)
            report.levels.append(result.level)
        if result.error:
            report.errors.append(result.error)
        items = _after_replace(store, session_id, items, step, created)
    report.items = items
    report.tokens_after = _total(items) + extra_tokens
    report.seconds = time.monotonic() - started
    return report


def _after_replace(
    store: LcmStore,
    session_id: str,
    items: list[ContextItem],
    step: Step,
    created: Summary | None,
) -> list[ContextItem]:
    """The context after ``step``'s run became ``created``, without reading it again.

    ``replace_run`` swapped exactly that run (its positions held nothing
    else) for one item at the run's first position. Re-reading the whole
    context after every summary made a compaction O(summaries x context):
    two thirds of its CPU, all of it holding the GIL beside the gateway's
    event loop. A run that was no longer there (another process compacted
    it) is read back from the database.
    """
    if created is None:
        return dag.context_items(store, session_id)
    folded = ContextItem(position=items[step.start].position, summary=created)
    return [*items[: step.start], folded, *items[step.end :]]


def _shrinking_can_fit(
    items: list[ContextItem], head: int, tail: int, total: int, budget: int
) -> bool:
    """Halving the lone item before the tail is worth it only if that can reach the budget.

    When what it cannot touch (the current turn, the pinned head) is over
    budget by itself, squeezing older summaries to nothing would destroy
    them for no gain: the current turn's own tool groups are folded instead.
    """
    if tail - head != 1:
        return True
    smallest = SUMMARY_HEADER_TOKENS + 16
    return total - items[head].tokens + smallest <= budget


def _bounded_target(run: list[ContextItem], target: int) -> int:
    """Never let a summary be as big as what it replaces: that would not converge."""
    source = sum(i.tokens for i in run)
    return max(8, min(target, (source - SUMMARY_HEADER_TOKENS) // 2 if len(run) == 1 else source))


def _source_of(item: ContextItem) -> tuple[str, int]:
    if item.message is not None:
        return ("message", item.message.id)
    assert item.summary is not None
    return ("summary", item.summary.id)


def _total(items: list[ContextItem]) -> int:
    return sum(item.tokens for item in items)
