"""What every copy of the Hermes plugin's engine shares: one ``LcmEngine``, opened lazily.

Hermes deep-copies the registered context engine for every agent; the copies hold per-agent
token counters and their bound session, and reach the database, the per-session locks and
the embedding worker through one ``SharedEngine``. It also answers the plugin's hooks
(``pre_llm_call``, ``post_llm_call``, ``on_session_finalize``), which Hermes calls with no
copy at hand.
"""

from __future__ import annotations

import atexit
import logging
import sys
import threading
import time
from typing import Any

from hermes_runtime.compat import AuxiliaryCall, observe_failed_turns
from hermes_runtime.compat.home import hermes_home
from hermes_runtime.lcm.compact.summarize import make_summarizer
from hermes_runtime.lcm.config import HermesConfigFile, LcmConfig
from hermes_runtime.lcm.embed.embedprocess import gateway_embedder
from hermes_runtime.lcm.engine.failedturns import TurnFailure
from hermes_runtime.lcm.engine.lcmengine import LcmEngine
from hermes_runtime.lcm.host.hostsettings import PluginHostSettings
from hermes_runtime.lcm.host.plugin_host import (
    commit_at_exit,
    in_background_review,
    serve_metrics,
    start_day_one_import,
)
from hermes_runtime.lcm.store import sessions

TURN_SYNC_WAIT_SECONDS = 2.0

logger = logging.getLogger(__name__)


class SharedEngine:
    """State every copy of the engine shares: created lazily, once."""

    def __init__(
        self, config: LcmConfig | None = None, settings: PluginHostSettings | None = None
    ) -> None:
        self._config = config
        # What the plugin takes from the environment, read once by ``register`` (else defaults).
        self.settings = settings or PluginHostSettings.model_validate({})
        self._engine: LcmEngine | None = None
        self._guard = threading.Lock()
        self.model_endpoint: tuple[str, str, str] = ("", "", "")
        self._lcm_sessions: dict[str, str] = {}
        self._sessions_guard = threading.Lock()
        # When this gateway loaded LCM: the day-one import archives only older messages.
        self.loaded_at = time.time()
        self._watching = False  # failed turns observed (or the adapter said why not)
        self.expander: AuxiliaryCall | None = None  # lcm_expand_query's model (``register``)
        self.config_file: HermesConfigFile | None = None  # config.yaml as ``register`` read it

    def bind_session(self, hermes_session_id: str, lcm_session_id: str) -> None:
        """Remember which LCM session holds a Hermes session (rotations keep the old one).

        Persisted in ``lcm.db`` (``host_sessions``): after a gateway restart a
        continuing Hermes session, rotated or not, finds its LCM session again.
        """
        if self.lcm_session(hermes_session_id, open_store=True) == lcm_session_id:
            return
        sessions.bind_host_session(self.engine().store, hermes_session_id, lcm_session_id)
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
        found = sessions.host_session(self.engine().store, hermes_session_id)
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
        if lcm_session is not None and conversation_history:
            self.sync_turn(lcm_session, conversation_history)

    def store_failed_turn(self, session_id: str, result: dict[str, Any]) -> None:
        """Observer of a turn whose model calls all failed (``compat/turn_outcome.py``): its
        transcript is stored, the failure recorded on it (``failedturns.py``)."""
        lcm_session = self.lcm_session(session_id or "")
        messages = result.get("messages")
        if lcm_session is not None and isinstance(messages, list) and messages:
            self.sync_turn(lcm_session, messages, TurnFailure.from_result(result))

    def watch_failed_turns(self) -> None:
        """Hand Hermes' failed turns to ``store_failed_turn``, once per process: called when
        an agent binds (Hermes' ``run_agent`` is then fully imported; plugins load while it
        is still being imported; without it, nothing to watch yet: asked again next bind)."""
        module = sys.modules.get("run_agent")
        with self._guard:
            if self._watching or module is None:
                return
            self._watching = True
        observe_failed_turns(self.store_failed_turn, module)

    def sync_turn(
        self,
        lcm_session: str,
        conversation: list[dict[str, Any]],
        failure: TurnFailure | None = None,
    ) -> None:
        """Store a turn's transcript in ``lcm_session`` (``failure``: the turn got no answer):
        bounded, never raises. Not on the background review's thread (``in_background_review``).
        """
        if in_background_review():
            return
        try:
            result = self.engine().sync_bounded(
                lcm_session, list(conversation), TURN_SYNC_WAIT_SECONDS, failure
            )
        except Exception as exc:  # a failed sync must not break the agent's turn
            logger.warning("LCM: storing the turn of session %s failed: %s", lcm_session, exc)
            return
        if result is None:
            logger.warning(
                "LCM: session %s busy; this turn is stored by the next sync", lcm_session
            )

    def warm_embedder(self, **_: Any) -> None:
        """``pre_llm_call``: a turn begins, the embedding model loads while the model answers
        (a search of the turn comes after that answer). Adds no context; an engine not open
        yet stays closed."""
        engine = self._engine
        if engine is not None:
            engine.warm_embedder()

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

    def _config_from_home(self) -> LcmConfig:
        """LCM's settings from Hermes' config.yaml, as ``register`` read it, else read now."""
        read = self.config_file or HermesConfigFile.read(hermes_home(self.settings.data_dir))
        return read.lcm_config()

    def engine(self) -> LcmEngine:
        with self._guard:
            if self._engine is None:
                config = self._config or self._config_from_home()
                embedder = gateway_embedder(config, self.settings.model_cache_dir)
                self._engine = LcmEngine(config, embedder=embedder, start_worker=True)
                self._engine.auxiliary = self.expander
                self._engine.start_background()  # checkpoints, indexing, embeddings
                atexit.register(commit_at_exit, self._engine)
                self._refresh_summarizer()
                serve_metrics(self.settings.metrics_port, self.settings.limits)
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
            self._engine.compactions.summarizer = make_summarizer(
                config.summary_base_url,
                config.summary_model or self.model_endpoint[1],
                config.summary_api_key or self.model_endpoint[2],
            )
        else:
            self._engine.compactions.summarizer = make_summarizer(*self.model_endpoint)
