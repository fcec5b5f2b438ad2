"""A compaction while the summary model fails: deferred, not folded into a rote extract.

Why: each summary climbs an escalation ladder (``summarize.py``) that ends in a
deterministic head+tail extract. Written while the provider is down (scaled to zero, 429
or 5xx bursts, timeouts, unreadable answers), that extract is a summary in name only, and
it stays: nothing summarizes those messages again once the provider is back. While the
host's context still fits the model's window nothing forces it, so the host's compaction
defers instead: the first failed summary call stops the compaction before it writes that
summary (each summary is one transaction: nothing half written; the messages were stored
by the sync before), the host keeps its own transcript (Hermes: "Compression aborted ...
No messages were dropped"), and its next compaction, once the provider answers, writes
real summaries. A context already at the window still gets the extract (as before): the
conversation must go on.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from hermes_runtime.lcm.compact.summarize import Summarizer


class SummaryDeferred(BaseException):
    """The summary model failed: this compaction stops before it writes a summary.

    Not an ``Exception``: the escalation ladder catches every ``Exception`` (any failure
    escalates to the extract); a deferral must get past it, as ``GeneratorExit`` does.
    """


@dataclass
class DeferringSummarizer:
    """A summarizer whose failure defers the compaction (``SummaryDeferred``)."""

    inner: Summarizer

    def summarize(
        self, text: str, target_tokens: int, level: int, timeout: float, focus: str = ""
    ) -> str:
        try:
            return self.inner.summarize(text, target_tokens, level, timeout, focus=focus)
        except Exception as exc:
            reason = f"summary model unavailable ({type(exc).__name__}: {exc})"[:300]
            raise SummaryDeferred(f"{reason}; compaction deferred") from exc


def deferring(summarizer: Summarizer | None, defer: bool) -> Summarizer | None:
    """``summarizer``, made to defer on failure when ``defer`` (None stays None: without a
    summary model the extract is the summary, by configuration)."""
    return DeferringSummarizer(summarizer) if defer and summarizer is not None else summarizer


def may_defer(messages: list[dict[str, Any]], tokens: int, context_length: int) -> bool:
    """Whether the host's context (``tokens``, as it counted them) still fits its model's
    window, so a compaction can wait for the summary model (unknown window: it cannot)."""
    return bool(messages) and 0 < tokens < context_length
