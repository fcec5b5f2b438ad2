"""Hermes integration: an LCM ``ContextEngine`` registered through the plugin system.

Enable it in Hermes' config.yaml::

    plugins: {enabled: [lcm]}
    context: {engine: lcm}
    lcm: {threshold_percent: 0.75}      # optional, see docs/lcm.md

Hermes deep-copies the registered engine for every agent and calls
``compress`` from pooled threads. Copies share one ``LcmEngine`` (database,
per-session locks, embedding worker) through ``SharedEngine`` (``sharedengine.py``); only
the per-agent token counters and the bound session are copied.

Every turn is stored as it happens: ``register`` also hooks
``post_llm_call`` (fired by Hermes once per turn, after the reply), which
syncs the turn's transcript into the LCM session the engine bound to that
Hermes session. Compaction, tool calls and session end still sync too; the
sync dedups, so the hook and they never store a message twice. The hook
queues the turn and a writer thread commits the queue every
``lcm.commit_interval_ms`` (group commit, ``writebehind.py``). A turn whose
model calls all failed fires no hook: the adapter ``compat/turn_outcome.py``
hands it over, and it is stored with the failure recorded (``failedturns.py``).
"""

from __future__ import annotations

import logging
import os
import threading
from typing import Any

from hermes_runtime.compat import (
    check_hooks,
    check_registration,
    engine_base,
)
from hermes_runtime.compat.home import hermes_home
from hermes_runtime.lcm.compact.assembly import count_tokens
from hermes_runtime.lcm.compact.compaction import CompactionReport
from hermes_runtime.lcm.compact.outage import SummaryDeferred, may_defer
from hermes_runtime.lcm.compact.summarize import LEVEL_DETERMINISTIC
from hermes_runtime.lcm.config import HermesConfigFile, LcmConfig
from hermes_runtime.lcm.engine.lcmengine import LcmEngine
from hermes_runtime.lcm.engine.tools import offered_schemas
from hermes_runtime.lcm.host.hostsettings import PluginHostSettings
from hermes_runtime.lcm.host.plugin_host import (
    open_existing_database,
    query_expander,
    warm_static_embedder,
    with_memory_context,
)
from hermes_runtime.lcm.host.sharedengine import SharedEngine

# Hermes' ABC, checked by the adapter (compat/context_engine.py): on a Hermes release or an
# ABC it does not know, importing this plugin fails with HermesIncompatible, which names both.
ContextEngine: Any = engine_base()
TURN_HOOKS = ("pre_llm_call", "post_llm_call", "on_session_finalize")
MIN_BUDGET_TOKENS = 512
# Guards the attempt counter of every copy of the engine (``LcmContextEngine._publish``).
_ATTEMPTS = threading.Lock()

logger = logging.getLogger(__name__)


class LcmContextEngine(ContextEngine):
    """Lossless Context Management for Hermes: nothing is dropped, everything expands back."""

    def __init__(
        self,
        config: LcmConfig | None = None,
        shared: SharedEngine | None = None,
        settings: PluginHostSettings | None = None,
    ) -> None:
        self._shared = shared or SharedEngine(config, settings)
        self._session_id = ""
        self.last_prompt_tokens = 0
        self.last_completion_tokens = 0
        self.last_total_tokens = 0
        self.context_length = 0
        self.threshold_tokens = 0
        self.compression_count = 0
        self.threshold_percent = config.threshold_percent if config else 0.75
        self._target_percent = config.target_percent if config else 0.5
        self._last_compress_aborted = False
        self._last_summary_error: str | None = None
        self._last_compression_made_progress = False
        self._last_summary_fallback_used = False
        self._attempt = 0  # compress() calls begun on this copy (``_claim_attempt``)

    @property
    def name(self) -> str:
        return "lcm"

    @property
    def engine(self) -> LcmEngine:
        engine = self._shared.engine()
        self.threshold_percent = engine.config.threshold_percent
        self._target_percent = engine.config.target_percent
        return engine

    @property
    def session_id(self) -> str:
        return self._session_id or "default"

    def __deepcopy__(self, memo: dict[int, Any]) -> LcmContextEngine:
        """Share the database and locks; copy only this agent's counters and session."""
        clone = LcmContextEngine.__new__(LcmContextEngine)
        clone.__dict__.update(self.__dict__)
        clone._shared = self._shared
        memo[id(self)] = clone
        return clone

    # -- token accounting --------------------------------------------------

    def update_from_response(self, usage: dict[str, Any]) -> None:
        self.last_prompt_tokens = int(usage.get("prompt_tokens") or 0)
        self.last_completion_tokens = int(usage.get("completion_tokens") or 0)
        self.last_total_tokens = int(usage.get("total_tokens") or 0)

    def update_model(
        self,
        model: str,
        context_length: int,
        base_url: str = "",
        api_key: str = "",
        provider: str = "",
        api_mode: str = "",
    ) -> None:
        engine = self.engine
        self.context_length = int(context_length or 0)
        self.threshold_tokens = int(self.context_length * engine.config.threshold_percent)
        self._shared.set_model_endpoint(base_url, model, api_key)

    def should_compress(self, prompt_tokens: int | None = None) -> bool:
        tokens = prompt_tokens if prompt_tokens is not None else self.last_prompt_tokens
        return bool(self.threshold_tokens) and tokens >= self.threshold_tokens

    def should_compress_preflight(self, messages: list[dict[str, Any]]) -> bool:
        return bool(self.threshold_tokens) and count_tokens(messages) >= self.threshold_tokens

    def has_content_to_compress(self, messages: list[dict[str, Any]]) -> bool:
        return len(messages) > self.engine.config.policy.fresh_tail_messages

    # -- compaction --------------------------------------------------------

    def compress(
        self,
        messages: list[dict[str, Any]],
        current_tokens: int | None = None,
        focus_topic: str | None = None,
        force: bool = False,
        memory_context: str = "",
    ) -> list[dict[str, Any]]:
        """Ingest what is new, fold old turns into summaries, return the fitted context.

        ``focus_topic`` (``/compress <topic>``) steers this compaction's
        summaries. ``memory_context`` (what the memory provider returned just
        before compaction) is never ingested nor summarized: it rides in the
        system part of the returned context, replacing the one of an earlier
        compaction, and stays there until a newer one arrives.
        """
        attempt = self._claim_attempt()
        engine = self.engine
        session = self.session_id
        focus = (focus_topic or "").strip()
        tokens = max(current_tokens or 0, count_tokens(messages))
        defer = may_defer(messages, tokens, self.context_length)
        try:
            with engine.session_lock(session):
                synced = engine.sync(session, messages)
                head = with_memory_context(synced.system_head, memory_context)
                target = int(self.context_length * self._target_percent) - (
                    tokens - count_tokens(messages)
                )
                budget = max(MIN_BUDGET_TOKENS, target)
                fitted, report = engine.compactions.fitted_context(
                    session, budget, head, focus, defer
                )
                if force and not report.summaries_created:
                    report = engine.compactions.compact(
                        session, budget, force=True, focus=focus, defer=defer
                    )
                    conversation = engine.context(session)
                    engine.remember_context(session, conversation)
                    fitted = head + conversation
        except SummaryDeferred as deferred:  # the messages are stored; summaries wait
            self._publish_deferred(attempt, str(deferred))
            return messages
        shrunk = count_tokens(fitted) < count_tokens(messages)
        self._publish(attempt, report, bool(report.summaries_created) or shrunk)
        return fitted

    def _claim_attempt(self) -> int:
        """Number this ``compress()`` call among those begun on this copy of the engine."""
        with _ATTEMPTS:
            self._attempt += 1
            return self._attempt

    def _publish(self, attempt: int, report: CompactionReport, progress: bool) -> None:
        """Set the counters and verdicts the host reads after ``compress()`` returns.

        Only the newest call on this copy sets them. Hermes from v0.21 gives up
        on a late ``compress()``, restores these fields and retries on the same
        object while the late call still runs (it waits for our session lock):
        the late call ending last must not count a compaction the host dropped,
        nor overwrite the retry's verdict. ``progress`` is whether the context
        handed back is smaller than the host's, not whether this call wrote the
        summaries: a retry that finds the late call's summaries returns the
        compacted context, which is progress to the host.
        """
        with _ATTEMPTS:
            if attempt != self._attempt:
                return
            self.compression_count += 1
            self._last_compress_aborted = False
            self._last_compression_made_progress = progress
            used_fallback = LEVEL_DETERMINISTIC in report.levels and bool(report.errors)
            self._last_summary_fallback_used = used_fallback
            self._last_summary_error = report.errors[-1] if used_fallback else None
            self.last_prompt_tokens = -1 if progress else self.last_prompt_tokens

    def _publish_deferred(self, attempt: int, reason: str) -> None:
        """A compaction deferred while the summary model fails (``outage.py``): Hermes'
        "aborted" verdict (it keeps its transcript, says so, and compacts again later)."""
        logger.warning("LCM: session %s: %s", self.session_id, reason)
        with _ATTEMPTS:
            if attempt == self._attempt:
                self._last_compress_aborted = True
                self._last_summary_error = reason
                self._last_compression_made_progress = False
                self._last_summary_fallback_used = False

    # -- lifecycle ---------------------------------------------------------

    def on_session_start(self, session_id: str, **kwargs: Any) -> None:
        """Bind to a session; a rotation after compaction keeps the same LCM session.

        The binding is shared, so the per-turn hook and engines created later
        for the rotated id (a new agent per API request) find the same LCM
        session instead of starting a second one.
        """
        old_session_id = kwargs.get("old_session_id")
        kept = ""
        if old_session_id:
            kept = (
                self._session_id
                or self._shared.lcm_session(str(old_session_id), open_store=True)
                or ""
            )
        bound = self._shared.lcm_session(session_id, open_store=True)
        self._session_id = kept or bound or session_id
        self._shared.bind_session(session_id, self._session_id)
        self._shared.watch_failed_turns()

    def on_session_end(self, session_id: str, messages: list[dict[str, Any]]) -> None:
        """Store what is new, and commit what the turn hook queued (Hermes calls this at
        session boundaries and for every live agent when the gateway shuts down)."""
        if messages:
            self.engine.sync(self.session_id, messages)
        self._shared.commit_queue()

    def on_turn_complete(
        self, messages: list[dict[str, Any]], usage: dict[str, Any] | None = None, **_: Any
    ) -> None:
        """Hermes from v0.21: the finished turn, on this copy (bound to its session).

        Stores it as the ``post_llm_call`` hook does (that hook fires there
        too: the second sync of a turn finds nothing new and writes nothing).
        Hermes 0.19.0 never calls it. ``select_context`` is not implemented:
        LCM replaces the context only when it compacts, so every request keeps
        the prompt-cache prefix the host already has.
        """
        if self._session_id and messages:
            self._shared.sync_turn(self._session_id, messages)

    # -- tools -------------------------------------------------------------

    def get_tool_schemas(self) -> list[dict[str, Any]]:
        return offered_schemas(auxiliary=self._shared.expander is not None)

    def handle_tool_call(self, name: str, args: dict[str, Any], **kwargs: Any) -> str:
        engine = self.engine
        live = kwargs.get("messages")
        if isinstance(live, list) and live:
            engine.sync(self.session_id, live)
        return engine.handle_tool(name, args, self.session_id)

    def get_status(self) -> dict[str, Any]:
        status = super().get_status()
        status["engine"] = "lcm"
        status["lcm_session"] = self.session_id
        return status


def register(ctx: Any) -> None:
    """Hermes plugin hook: offer the LCM engine (selected by ``context.engine: lcm``).

    The ``post_llm_call`` hook shares the engine's state, so it stores each
    turn in the session that engine copies bound to; ``on_session_finalize``
    commits the turns that hook queued (group commit). A plugin context
    without the registration calls is refused, a hook the host does not list
    is logged as degraded (``compat/context_engine.py``). ``lcm_expand_query`` is offered
    only when config.yaml names an auxiliary model for it (``plugin_host.query_expander``).
    The plugin's settings (``hostsettings.py``) and Hermes' config.yaml are read here, once.
    """
    check_registration(ctx)
    settings = PluginHostSettings.from_environ(os.environ)
    engine = LcmContextEngine(settings=settings)
    config_file = HermesConfigFile.read(hermes_home(settings.data_dir))
    engine._shared.config_file = config_file
    engine._shared.expander = query_expander(ctx, config_file)  # before the engine opens
    ctx.register_context_engine(engine)
    check_hooks(TURN_HOOKS)
    ctx.register_hook("pre_llm_call", engine._shared.warm_embedder)
    ctx.register_hook("post_llm_call", engine._shared.store_turn)
    ctx.register_hook("on_session_finalize", engine._shared.commit_queue)
    warm_static_embedder(config_file)
    open_existing_database(engine._shared.engine, config_file)
