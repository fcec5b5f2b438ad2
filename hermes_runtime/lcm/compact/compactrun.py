"""An engine's compactions: one session at a time, measured, and fitted to a budget.

Why a module of its own: ``compaction.compact`` folds a session's context
into summaries; running it for a host adds the session lock, the metrics, the
retention gauges (``retention.py``, refreshed at most every
``RETENTION_REFRESH_SECONDS``), the embedding worker's wake-up, and the
refit passes that bring an assembled context under the budget. An engine
keeps one ``Compactions`` (``LcmEngine.compactions``) and hands it what it
uses: the store, the policy, the session locks and two callbacks, never
itself, so this module knows nothing of the engine.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from hermes_runtime.lcm import metrics
from hermes_runtime.lcm.compact import outage
from hermes_runtime.lcm.compact.assembly import assemble, count_tokens
from hermes_runtime.lcm.compact.compaction import CompactionReport, compact
from hermes_runtime.lcm.compact.policy import CompactionPolicy
from hermes_runtime.lcm.compact.summarize import Summarizer
from hermes_runtime.lcm.store.lcmstore import LcmStore
from hermes_runtime.lcm.store.retention import retention

# Extra compaction passes when the assembled context measures over budget.
MAX_REFIT_PASSES = 4
# How often compactions refresh the retention gauges: a dozen lookups each time, for
# figures a scraper reads far less often than turns compact. ``lcm stats`` always reads
# them fresh.
RETENTION_REFRESH_SECONDS = 10.0


class Compactions:
    """The compactions of one engine: its store and policy, under its session locks.

    ``summarizer`` may be replaced at any time (the Hermes plugin binds the
    model once it knows it); the next compaction uses the new one.
    ``session_lock`` gives a session's lock; ``on_summaries`` is called after
    a compaction created summaries (the embedding worker's wake-up);
    ``remember_context`` records the context handed to a host.
    """

    def __init__(
        self,
        store: LcmStore,
        policy: CompactionPolicy,
        session_lock: Callable[[str], threading.RLock],
        remember_context: Callable[[str, list[dict[str, Any]]], None],
        summarizer: Summarizer | None = None,
        on_summaries: Callable[[], None] | None = None,
    ) -> None:
        self.store = store
        self.policy = policy
        self.summarizer = summarizer
        self._session_lock = session_lock
        self._remember_context = remember_context
        self._on_summaries = on_summaries
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
        with self._session_lock(session_id):
            report = compact(
                self.store,
                session_id,
                budget,
                outage.deferring(self.summarizer, defer),
                self.policy,
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
            retention(self.store)
            self._retention_due = time.monotonic() + RETENTION_REFRESH_SECONDS
        if self._on_summaries is not None and report.summaries_created:
            self._on_summaries()
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
        head = system_head or []
        head_tokens = count_tokens(head)
        with self._session_lock(session_id):
            report = self.compact(
                session_id, budget, extra_tokens=head_tokens, focus=focus, defer=defer
            )
            messages = assemble(self.store, session_id, report.items)
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
                messages = assemble(self.store, session_id, again.items)
            report.tokens_after = head_tokens + count_tokens(messages)
            self._remember_context(session_id, messages)
        return head + messages, report
