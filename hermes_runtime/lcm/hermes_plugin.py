"""Hermes integration: an LCM ``ContextEngine`` registered through the plugin system.

Enable it in Hermes' config.yaml::

    plugins: {enabled: [lcm]}
    context: {engine: lcm}
    lcm: {threshold_percent: 0.75}      # optional, see docs/lcm.md

Hermes deep-copies the registered engine for every agent and calls
``compress`` from pooled threads. Copies share one ``LcmEngine`` (database,
per-session locks, embedding worker) through ``_Shared``; only the per-agent
token counters and the bound session are copied.

Every turn is stored as it happens: ``register`` also hooks
``post_llm_call`` (fired by Hermes once per turn, after the reply), which
syncs the turn's transcript into the LCM session the engine bound to that
Hermes session. Compaction, tool calls and session end still sync too; the
sync dedups, so the hook and they never store a message twice. The hook
queues the turn and a writer thread commits the queue every
``lcm.commit_interval_ms`` (group commit, ``writebehind.py``).
"""

from __future__ import annotations

import atexit
import logging
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from agent.context_engine import ContextEngine

from hermes_runtime.lcm.assembly import count_tokens
from hermes_runtime.lcm.config import LcmConfig
from hermes_runtime.lcm.engine import TOOL_SCHEMAS, LcmEngine, make_summarizer
from hermes_runtime.lcm.summarize import LEVEL_DETERMINISTIC

MIN_BUDGET_TOKENS = 512
METRICS_PORT_ENV = "HERMES_RUNTIME_LCM_METRICS_PORT"
TURN_SYNC_WAIT_SECONDS = 2.0

logger = logging.getLogger(__name__)


def hermes_home() -> Path:
    return Path(os.environ.get("HERMES_HOME") or Path.home() / ".hermes")


def read_lcm_section(home: Path) -> dict[str, Any]:
    """The ``lcm:`` mapping of ``$HERMES_HOME/config.yaml`` ({} when absent)."""
    from ruamel.yaml import YAML

    path = home / "config.yaml"
    if not path.exists():
        return {}
    data = YAML(typ="safe").load(path.read_text(encoding="utf-8")) or {}
    section = data.get("lcm") if isinstance(data, dict) else None
    return section if isinstance(section, dict) else {}


def serve_metrics(port: str) -> None:
    """Expose LCM's Prometheus figures from the process that runs the engine.

    The Hermes gateway is a child process of the runtime's supervisor, so
    LCM's counters live in the gateway; with ``HERMES_RUNTIME_LCM_METRICS_PORT``
    set, they are served there on ``/metrics``. A busy port is logged, not
    fatal: metrics must never stop the agent.
    """
    if not port:
        return
    from prometheus_client import start_http_server

    from hermes_runtime.common.logs import log_event

    try:
        start_http_server(int(port), addr="0.0.0.0")
    except (OSError, ValueError) as exc:
        log_event("lcm.metrics.unavailable", port=port, error=str(exc))


IMPORT_PREFIX = "hermes-state:"


def start_day_one_import(
    engine: LcmEngine, state_db: Path, before: float
) -> threading.Thread | None:
    """On a brand-new LCM database, archive Hermes' existing history in the background.

    Sessions land under ``hermes-state:<id>``, searchable with ``scope: all``
    from the first turn; live sessions keep their own ids, so nothing is
    ingested twice into one session. Runs once: a database that already has
    sessions is left alone (``lcm import --hermes-state`` completes by hand).
    Only messages written ``before`` the gateway loaded LCM are archived: later
    turns are stored live by the engine, and must not appear twice.

    The import runs in a child process, never in the gateway: Hermes holds
    ``state.db`` open through the standard ``sqlite3`` module, and apsw brings
    a second SQLite library into the process. Two SQLite libraries in one
    process do not see each other's POSIX locks, so one can truncate the
    ``-shm`` file the other has mapped (the gateway died of SIGBUS in 3 of 8
    e2e runs). In its own process the importer is an ordinary second reader.
    A thread only waits for the child and logs how it ended.
    """
    if not state_db.exists() or engine.store.counts()["sessions"]:
        return None
    command = [
        sys.executable,
        "-m",
        "hermes_runtime",
        "lcm",
        "import",
        "--db",
        str(engine.config.db_path),
        "--outputs",
        str(engine.config.outputs_dir),
        "--hermes-state",
        str(state_db),
        "--prefix",
        IMPORT_PREFIX,
        "--before",
        repr(before),
        "--json",
    ]

    def run() -> None:
        from hermes_runtime.common.logs import log_event

        try:
            child = subprocess.run(command, capture_output=True, text=True, check=False)
        except OSError as exc:  # the agent must start even if the archive cannot be read
            log_event("lcm.import.failed", state_db=str(state_db), error=str(exc))
            return
        if child.returncode == 0:
            log_event("lcm.import.done", state_db=str(state_db))
        else:
            error = child.stderr.strip().splitlines()[-1:] or [f"exit {child.returncode}"]
            log_event("lcm.import.failed", state_db=str(state_db), error=error[0])

    thread = threading.Thread(target=run, name="lcm-day-one-import", daemon=True)
    thread.start()
    return thread


def in_background_review() -> bool:
    """True on the thread of Hermes' background memory/skill review fork.

    The fork shares the parent's session id but replays the transcript with
    its own harness prompt appended; Hermes keeps its turns out of the
    session (``_persist_disabled``), and so must LCM, or the harness turn
    lands in the user's history and the next real sync no longer aligns.
    Hermes 0.19.0 marks that thread (and only it) with a tool whitelist.
    Runs every turn: the module is looked up, not imported (an import
    statement walks importlib's Python code each time); where Hermes' plugin
    module was never loaded, no thread can carry its marker.
    """
    plugins = sys.modules.get("hermes_cli.plugins")
    if plugins is None:
        return False
    marker = getattr(plugins, "_thread_tool_whitelist", None)
    return getattr(marker, "allowed", None) is not None


MEMORY_CONTEXT_MARKER = (
    "[LCM memory context: what the memory provider recalled at the last compaction; "
    "background knowledge, not part of the conversation]"
)


def with_memory_context(
    system_head: list[dict[str, Any]], memory_context: str
) -> list[dict[str, Any]]:
    """The host's system messages plus the newest memory context (one, never stacked).

    The host hands our previous memory message back among its leading system
    messages; a new ``memory_context`` replaces it, an empty one keeps it.
    """
    text = (memory_context or "").strip()
    if not text:
        return system_head
    kept = [m for m in system_head if not is_memory_message(m)]
    return [*kept, {"role": "system", "content": f"{MEMORY_CONTEXT_MARKER}\n{text}"}]


def is_memory_message(message: dict[str, Any]) -> bool:
    content = message.get("content")
    return (
        message.get("role") == "system"
        and isinstance(content, str)
        and content.startswith(MEMORY_CONTEXT_MARKER)
    )


def commit_at_exit(engine: LcmEngine) -> None:
    """The gateway's exit: commit the turns still queued (an error is logged, not lost)."""
    try:
        engine.store.stop_group_commit()
    except Exception as exc:  # the process ends anyway; the next sync re-stores the turns
        logger.warning("LCM: committing the queued turns at exit failed: %s", exc)


class _Shared:
    """State every copy of the engine shares: created lazily, once."""

    def __init__(self, config: LcmConfig | None = None) -> None:
        self._config = config
        self._engine: LcmEngine | None = None
        self._guard = threading.Lock()
        self.model_endpoint: tuple[str, str, str] = ("", "", "")
        self._lcm_sessions: dict[str, str] = {}
        self._sessions_guard = threading.Lock()
        # When this gateway loaded LCM: the day-one import archives only older messages.
        self.loaded_at = time.time()

    def bind_session(self, hermes_session_id: str, lcm_session_id: str) -> None:
        """Remember which LCM session holds a Hermes session (rotations keep the old one).

        Persisted in ``lcm.db`` (``host_sessions``): after a gateway restart a
        continuing Hermes session, rotated or not, finds its LCM session again.
        """
        if self.lcm_session(hermes_session_id, open_store=True) == lcm_session_id:
            return
        self.engine().store.bind_host_session(hermes_session_id, lcm_session_id)
        with self._sessions_guard:
            self._lcm_sessions[hermes_session_id] = lcm_session_id

    def lcm_session(self, hermes_session_id: str, open_store: bool = False) -> str | None:
        """The LCM session bound to this Hermes session (in this process or before), or None.

        Without ``open_store`` a process where no LCM engine was bound yet
        answers None without creating ``lcm.db`` (another context engine may
        be selected: the turn hook must then do nothing).
        """
        with self._sessions_guard:
            cached = self._lcm_sessions.get(hermes_session_id)
        if cached is not None or not hermes_session_id:
            return cached
        with self._guard:
            opened = self._engine is not None
        if not opened and not open_store:
            return None
        found = self.engine().store.host_session(hermes_session_id)
        if found is not None:
            with self._sessions_guard:
                self._lcm_sessions[hermes_session_id] = found
        return found

    def store_turn(
        self,
        session_id: str = "",
        conversation_history: list[dict[str, Any]] | None = None,
        **_: Any,
    ) -> None:
        """Hermes ``post_llm_call`` hook: store the turn that just finished.

        Only sessions an LCM engine was bound to are stored (with another
        context engine selected, the hook does nothing). Never raises into
        Hermes and never waits more than ``TURN_SYNC_WAIT_SECONDS`` for the
        session: a compaction in progress skips this sync, and the next one
        stores what is still missing. With group commit (``lcm.commit_interval_ms``
        > 0, the default) the turn is queued, not written: a busy database
        holds the writer thread, not Hermes, and an error of an earlier batch
        is logged here (its turns, and this one, are stored by the next sync).
        With 0 the turn is written here, waiting at most as long for the database.
        """
        lcm_session = self.lcm_session(session_id or "")
        if lcm_session is None or not conversation_history or in_background_review():
            return
        try:
            result = self.engine().sync_bounded(
                lcm_session, list(conversation_history), TURN_SYNC_WAIT_SECONDS
            )
        except Exception as exc:  # a failed sync must not break the agent's turn
            logger.warning("LCM: storing the turn of session %s failed: %s", lcm_session, exc)
            return
        if result is None:
            logger.warning(
                "LCM: session %s busy; this turn is stored by the next sync", lcm_session
            )

    def commit_queue(self, **_: Any) -> None:
        """Hermes ``on_session_finalize`` hook (a gateway shutdown fires it for every live
        agent, before it ends the process with ``os._exit``, which skips ``atexit``):
        commit the turns the hook queued. Logs, never raises into Hermes."""
        with self._guard:
            engine = self._engine
        if engine is None:
            return
        try:
            engine.flush()
        except Exception as exc:  # the next sync of each session stores the turns again
            logger.warning("LCM: committing the queued turns failed: %s", exc)

    def engine(self) -> LcmEngine:
        with self._guard:
            if self._engine is None:
                config = self._config or LcmConfig.for_home(
                    hermes_home(), read_lcm_section(hermes_home())
                )
                self._engine = LcmEngine(config, start_worker=True)
                atexit.register(commit_at_exit, self._engine)
                self._refresh_summarizer()
                serve_metrics(os.environ.get(METRICS_PORT_ENV, ""))
                if config.import_hermes_state:
                    start_day_one_import(
                        self._engine, config.db_path.parent / "state.db", self.loaded_at
                    )
            return self._engine

    def set_model_endpoint(self, base_url: str, model: str, api_key: str) -> None:
        with self._guard:
            self.model_endpoint = (base_url, model, api_key)
            self._refresh_summarizer()

    def _refresh_summarizer(self) -> None:
        if self._engine is None:
            return
        config = self._engine.config
        if config.summary_base_url:
            self._engine.summarizer = make_summarizer(
                config.summary_base_url,
                config.summary_model or self.model_endpoint[1],
                config.summary_api_key or self.model_endpoint[2],
            )
        else:
            self._engine.summarizer = make_summarizer(*self.model_endpoint)


class LcmContextEngine(ContextEngine):
    """Lossless Context Management for Hermes: nothing is dropped, everything expands back."""

    def __init__(self, config: LcmConfig | None = None, shared: _Shared | None = None) -> None:
        self._shared = shared or _Shared(config)
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
        engine = self.engine
        session = self.session_id
        focus = (focus_topic or "").strip()
        with engine.session_lock(session):
            synced = engine.sync(session, messages)
            head = with_memory_context(synced.system_head, memory_context)
            overhead = max(0, (current_tokens or 0) - count_tokens(messages))
            target = int(self.context_length * self._target_percent) - overhead
            budget = max(MIN_BUDGET_TOKENS, target)
            fitted, report = engine.fitted_context(session, budget, head, focus=focus)
            if force and not report.summaries_created:
                report = engine.compact(session, budget, force=True, focus=focus)
                conversation = engine.context(session)
                engine.remember_context(session, conversation)
                fitted = head + conversation
        self.compression_count += 1
        self._last_compress_aborted = False
        self._last_compression_made_progress = bool(report.summaries_created)
        used_fallback = LEVEL_DETERMINISTIC in report.levels and bool(report.errors)
        self._last_summary_fallback_used = used_fallback
        self._last_summary_error = report.errors[-1] if used_fallback else None
        self.last_prompt_tokens = -1 if report.summaries_created else self.last_prompt_tokens
        return fitted

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

    def on_session_end(self, session_id: str, messages: list[dict[str, Any]]) -> None:
        """Store what is new, and commit what the turn hook queued (Hermes calls this at
        session boundaries and for every live agent when the gateway shuts down)."""
        if messages:
            self.engine.sync(self.session_id, messages)
        self._shared.commit_queue()

    # -- tools -------------------------------------------------------------

    def get_tool_schemas(self) -> list[dict[str, Any]]:
        return [dict(schema) for schema in TOOL_SCHEMAS]

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
    commits the turns that hook queued (group commit).
    """
    engine = LcmContextEngine()
    ctx.register_context_engine(engine)
    ctx.register_hook("post_llm_call", engine._shared.store_turn)
    ctx.register_hook("on_session_finalize", engine._shared.commit_queue)
    warm_static_embedder()


def warm_static_embedder() -> None:
    """Load the static embedding model now, at gateway start, before any request.

    Its Rust loader keeps the GIL for the whole load (1-4 s here), which froze
    the gateway's event loop when the first embedding happened mid-traffic
    (bench/lcm_loop_lag.py). Only for ``lcm.embeddings: static``; e5's engine
    runs through ctypes, which releases the GIL. Never fatal.
    """
    try:
        if read_lcm_section(hermes_home()).get("embeddings") == "static":
            from hermes_runtime.lcm.embeddings import StaticModelEmbedder

            StaticModelEmbedder().embed(["warm-up"])
    except Exception as exc:  # the agent must start; embedding loads later instead
        logger.warning("LCM: could not preload the static embedder: %s", exc)
