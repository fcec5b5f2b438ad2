"""Summarizers and the escalation ladder that always produces a summary that fits.

Level 1 asks the LLM for a detailed summary, level 2 for a short one, level
3 is a deterministic head-and-tail extract that cannot fail. A summary is
accepted only if it is non-empty and within its token target, so a model
that hangs, errors or rambles costs at most the per-call timeout and never
a lost or oversized summary.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from typing import Protocol

import httpx

from hermes_runtime.lcm.records import estimate_tokens

LEVEL_DETAILED, LEVEL_SHORT, LEVEL_DETERMINISTIC = 1, 2, 3

DETAILED_PROMPT = (
    "You summarize part of a long conversation for the assistant's own memory. "
    "Keep facts, names, numbers, decisions, file paths, commands, errors and open "
    "tasks; drop chit-chat. Write at most {target} tokens. Output only the summary."
)
SHORT_PROMPT = (
    "Summarize this conversation excerpt in at most {target} tokens: only the key "
    "facts, decisions and open tasks. Output only the summary."
)
FOCUS_PROMPT = (
    " FOCUS TOPIC: {focus!r}. Keep everything related to it in full detail (exact "
    "values, names, file paths, commands, errors, decisions) and give it most of the "
    "budget; cover everything else in a line or drop it."
)
FOCUS_WORD = re.compile(r"[^\W_]{3,}")
FOCUS_STOPWORDS = frozenset({"the", "and", "for", "with", "about", "that", "this", "from", "what"})


class Summarizer(Protocol):
    """Anything that turns text into a summary of at most ``target_tokens`` or raises."""

    def summarize(
        self, text: str, target_tokens: int, level: int, timeout: float, focus: str = ""
    ) -> str: ...


@dataclass
class OpenAISummarizer:
    """Calls an OpenAI-compatible ``/chat/completions`` endpoint (the agent's model by default)."""

    base_url: str
    model: str
    api_key: str = ""

    def summarize(
        self, text: str, target_tokens: int, level: int, timeout: float, focus: str = ""
    ) -> str:
        prompt = DETAILED_PROMPT if level == LEVEL_DETAILED else SHORT_PROMPT
        if focus:
            prompt += FOCUS_PROMPT.format(focus=focus)
        headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}
        payload = {
            "model": self.model,
            "messages": [
                {"role": "system", "content": prompt.replace("{target}", str(target_tokens))},
                {"role": "user", "content": text},
            ],
            "max_tokens": max(16, target_tokens),
            "temperature": 0,
        }
        response = httpx.post(
            self.base_url.rstrip("/") + "/chat/completions",
            json=payload,
            headers=headers,
            timeout=httpx.Timeout(timeout, connect=min(timeout, 5.0)),
        )
        response.raise_for_status()
        choice = response.json()["choices"][0]["message"]
        return str(choice.get("content") or "").strip()


def make_summarizer(base_url: str, model: str, api_key: str = "") -> Summarizer | None:
    """An OpenAI-compatible summarizer, or None without an endpoint and a model."""
    return OpenAISummarizer(base_url, model, api_key) if base_url and model else None


def deterministic_summary(text: str, target_tokens: int, focus: str = "") -> str:
    """Head and tail of the source text, cut to fit: the level that cannot fail.

    With a focus topic (Hermes' ``/compress <topic>``) the lines that mention
    it come first, so a failing summarizer still keeps what the user asked
    to keep; head and tail of the other lines fill what budget is left.
    """
    budget = max(8, target_tokens) * 4
    if len(text) <= budget:
        return text
    if focus:
        return _focused_extract(text, budget, focus)
    return _head_and_tail(text, budget)


def _focused_extract(text: str, budget: int, focus: str) -> str:
    words = {w.lower() for w in FOCUS_WORD.findall(focus)} - FOCUS_STOPWORDS
    lines = text.split("\n")
    hits = [i for i, line in enumerate(lines) if words & set(FOCUS_WORD.findall(line.lower()))]
    if not hits:
        return _head_and_tail(text, budget)
    kept = "\n".join(lines[i] for i in hits)
    separator = "\n[...]\n"
    if len(kept) + len(separator) >= budget:
        return kept[:budget]
    chosen = set(hits)
    rest = "\n".join(line for i, line in enumerate(lines) if i not in chosen)
    room = budget - len(kept) - len(separator)
    return kept + separator + _head_and_tail(rest, room) if rest and room >= 8 else kept


def _head_and_tail(text: str, budget: int) -> str:
    if len(text) <= budget:
        return text
    marker = " [...] "
    head_len = (budget - len(marker)) * 2 // 3
    tail_len = budget - len(marker) - head_len
    return text[:head_len] + marker + (text[-tail_len:] if tail_len > 0 else "")


@dataclass
class SummaryResult:
    content: str
    level: int
    error: str | None = None


def summarize_with_escalation(
    summarizer: Summarizer | None,
    text: str,
    target_tokens: int,
    deadline: float,
    call_timeout: float,
    focus: str = "",
) -> SummaryResult:
    """Try detailed, then short, then deterministic; the result always fits the target."""
    errors: list[str] = []
    if summarizer is not None:
        for level, target in ((LEVEL_DETAILED, target_tokens), (LEVEL_SHORT, target_tokens // 2)):
            remaining = deadline - time.monotonic()
            if remaining <= 0.05:
                errors.append("compaction deadline reached")
                break
            try:
                content = summarizer.summarize(
                    text, max(8, target), level, min(call_timeout, remaining), focus=focus
                )
            except Exception as exc:  # any failure escalates; nothing is lost
                errors.append(f"level {level}: {type(exc).__name__}: {exc}"[:300])
                continue
            if content and estimate_tokens(content) <= target_tokens:
                return SummaryResult(content, level, "; ".join(errors) or None)
            errors.append(f"level {level}: unusable summary ({estimate_tokens(content)} tokens)")
    return SummaryResult(
        deterministic_summary(text, target_tokens, focus),
        LEVEL_DETERMINISTIC,
        "; ".join(errors) or None,
    )
