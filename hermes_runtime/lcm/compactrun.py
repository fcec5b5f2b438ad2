"""An engine's compactions: one session at a time, measured, and fitted to a budget.

Why a module of its own: ``compaction.compact`` folds a session's context
into summaries; running it for a host adds the session lock, the metrics, the
retention gauges (``retention.py``, refreshed at most every
``RETENTION_REFRESH_SECONDS``), the embedding worker's wake-up, and the
refit passes that bring an assembled context under the budget. The engine
(``LcmEngine.compact``, ``fitted_context``) hands both calls to a
``Compactions`` of its own.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from hermes_runtime.lcm import metrics, outage
from hermes_runtime.lcm.assembly import assemble, count_tokens
from hermes_runtime.lcm.compaction import CompactionReport, compact
from hermes_runtime.lcm.retention import retention

if TYPE_CHECKING:
    from hermes_runtime.lcm.engine import LcmEngine

# Extra compaction passes when the assembled context measures over budget.
MAX_REFIT_PASSES = 4
# How often compactions refresh the retention gauges: a dozen lookups each time,
# ~2% of a compress() in the engine loop, for figures scraped every 15-60 s.
# ``lcm stats`` always reads them fresh.
RETENTION_REFRESH_SECONDS = 10.0


class Compactions:
    """The compactions of one engine (its store, summarizer, policy, locks and worker)."""

    def __init__(self, engine: LcmEngine) -> None:
        self._engine = engine
        self._retention_due = 0.0  # time.monotonic() of the next gauge refresh

    def compact(
        self,
        session_id: str,
        budget: int,
        extra_tokens: int = 0,
        force: bool = False,
        focus: str = "",
        defer: bool = False,
    ) -> CompactionReport:
        """One compaction of a session under its lock; metrics, gauges, worker woken.
        ``defer``: a failing summary model stops the compaction (``outage.py``)."""
        engine = self._engine
        with engine.session_lock(session_id):
            report = compact(
                engine.store,
                session_id,
                budget,
                outage.deferring(engine.summarizer, defer),
                engine.config.policy,
                extra_tokens=extra_tokens,
                force=force,
                focus=focus,
            )
        metrics.COMPACTION_SECONDS.observe(report.seconds)
        metrics.COMPACTION_TOKENS_IN.inc(report.tokens_before)
        metrics.COMPACTION_TOKENS_OUT.inc(report.tokens_after)
        for level in report.levels:
            metrics.SUMMARIES.labels(level=str(level)).inc()
        metrics.COMPACTION_ERRORS.inc(len(report.errors))
        if time.monotonic() >= self._retention_due:  # size, retention and growth gauges
            retention(engine.store)
            self._retention_due = time.monotonic() + RETENTION_REFRESH_SECONDS
        if engine.worker is not None and report.summaries_created:
            engine.worker.wake()
        return report

    def fitted_context(
        self,
        session_id: str,
        budget: int,
        system_head: list[dict[str, Any]] | None = None,
        focus: str = "",
        defer: bool = False,
    ) -> tuple[list[dict[str, Any]], CompactionReport]:
        """Compact as needed, then assemble; the host's system messages ride in front.
        ``defer``: see ``compact`` (``SummaryDeferred`` is raised, nothing handed out)."""
        engine = self._engine
        head = system_head or []
        head_tokens = count_tokens(head)
        with engine.session_lock(session_id):
            report = self.compact(
                session_id, budget, extra_tokens=head_tokens, focus=focus, defer=defer
            )
            messages = assemble(engine.store, session_id, report.items)
            counted = report.tokens_after  # by stored per-item counts
            for _ in range(MAX_REFIT_PASSES):
                overflow = head_tokens + count_tokens(messages) - budget
                if overflow <= 0:
                    break
                # Stored per-item counts can miss what assembly adds (stubs, repaired
                # tool results): aim below what the counts say by the measured overflow.
                again = self.compact(
                    session_id, counted - overflow, head_tokens, focus=focus, defer=defer
                )
                counted = again.tokens_after
                report.summaries_created += again.summaries_created
                report.levels += again.levels
                report.errors += again.errors
                messages = assemble(engine.store, session_id, again.items)
            report.tokens_after = head_tokens + count_tokens(messages)
            engine.remember_context(session_id, messages)
        return head + messages, report
