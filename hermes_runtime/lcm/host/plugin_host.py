"""What the LCM plugin does in the host process beside its engine.

Beside ``hermes_plugin.py``, which needs Hermes' context-engine ABC: the metrics endpoint,
the day-one import of Hermes' ``state.db``, the static embedder's warm-up at gateway
start, opening an existing ``lcm.db`` at start, committing the queued turns at exit,
telling the background review's thread apart, the memory context a compaction hands
back, and the auxiliary model ``lcm_expand_query`` asks. Nothing here depends on Hermes'
context-engine ABC.
"""

from __future__ import annotations

import logging
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hermes_runtime.common.boundedhttp import ServerLimits
from hermes_runtime.compat import AuxiliaryCall, auxiliary_call, on_review_thread, register_task
from hermes_runtime.lcm.config import HermesConfigFile
from hermes_runtime.lcm.engine.lcmengine import LcmEngine

logger = logging.getLogger("hermes_runtime.lcm.host.hermes_plugin")  # the plugin's own log name


def serve_metrics(port: int | None, limits: ServerLimits) -> None:
    """Expose LCM's Prometheus figures from the process that runs the engine.

    The Hermes gateway is a child process of the runtime's supervisor, so
    LCM's counters live in the gateway; with a ``port`` (``PluginHostSettings.metrics_port``)
    they are served there on ``GET /metrics`` and nothing else (404 for any
    other path, 501 for any other method: prometheus_client's own server answers
    every path). A busy port is logged, not fatal: metrics must never stop the agent.

    The server runs in the gateway's process, so each connection's thread and time
    are bounded by ``limits`` (``common/boundedhttp.py``: connections at once and per
    address, the time to send the request head), the entrypoint's own caps for its
    metrics port (``PluginHostSettings``: the same variables).
    """
    if port is None:
        return
    from urllib.parse import urlsplit

    from prometheus_client import MetricsHandler

    from hermes_runtime.common.boundedhttp import BoundedHTTPServer, HeadCompleteMixin
    from hermes_runtime.common.logs import log_event

    class MetricsOnly(HeadCompleteMixin, MetricsHandler):
        def do_GET(self) -> None:
            if urlsplit(self.path).path != "/metrics":
                self.send_error(404, "only /metrics is served here")
                return
            super().do_GET()

    try:
        server = BoundedHTTPServer(("0.0.0.0", port), MetricsOnly, limits)
    except OSError as exc:
        log_event("lcm.metrics.unavailable", port=port, error=str(exc))
        return
    threading.Thread(target=server.serve_forever, name="lcm-metrics", daemon=True).start()


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
    ``-shm`` file the other has mapped, and the gateway dies of SIGBUS. In its
    own process the importer is an ordinary second reader. A thread only waits
    for the child and logs how it ended.
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


def commit_at_exit(engine: LcmEngine) -> None:
    """The gateway's exit: commit the turns still queued (an error is logged, not lost)."""
    try:
        engine.store.stop_group_commit()
    except Exception as exc:  # the process ends anyway; the next sync re-stores the turns
        logger.warning("LCM: committing the queued turns at exit failed: %s", exc)


def warm_static_embedder(config_file: HermesConfigFile) -> None:
    """Load the static embedding model now, at gateway start, before any request, when
    Hermes' config.yaml (``config_file``) picks it.

    Its Rust loader keeps the GIL for the whole load, which would freeze the
    gateway's event loop if the first embedding happened mid-traffic. Only for
    ``lcm.embeddings: static``; e5's engine runs through ctypes, which releases the
    GIL. Never fatal.
    """
    try:
        if config_file.lcm_section().get("embeddings") == "static":
            from hermes_runtime.lcm.embed.embedders import StaticModelEmbedder

            StaticModelEmbedder().embed(["warm-up"])
    except Exception as exc:  # the agent must start; embedding loads later instead
        logger.warning("LCM: could not preload the static embedder: %s", exc)


def open_existing_database(
    open_engine: Callable[[], object], config_file: HermesConfigFile
) -> threading.Thread | None:
    """With LCM selected by Hermes' config.yaml (``config_file``) and ``lcm.db`` already
    there, open it now, in the background.

    The first writable open migrates the schema and builds the full-text index file; left
    to the first turn, a read-only reader (``lcm grep`` from the CLI, the readiness probe's
    LCM check) finds no index after an upgrade until somebody talks to the agent, and LCM's
    metrics port stays closed. A new volume keeps the lazy open: nothing creates ``lcm.db``
    before LCM is used (another context engine may be selected).
    """
    config = config_file.selected()
    if config is None or not config.db_path.exists():
        return None

    def open_now() -> None:
        try:
            open_engine()
        except Exception as exc:  # the first turn opens it again and reports the error there
            logger.warning("LCM: opening the existing database at start failed: %s", exc)

    thread = threading.Thread(target=open_now, name="lcm-open", daemon=True)
    thread.start()
    return thread


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


def in_background_review() -> bool:
    """True on the thread of Hermes' background memory/skill review fork.

    The fork shares the parent's session id but replays the transcript with
    its own harness prompt appended; Hermes keeps its turns out of the
    session (``_persist_disabled``), and so must LCM, or the harness turn
    lands in the user's history and the next real sync no longer aligns.
    Hermes 0.19.0 marks that thread (and only it) with a tool whitelist; the
    adapter (``compat/background_review.py``) checks that marker once and logs
    when it cannot be read. Runs every turn: the module is looked up, not
    imported (an import statement walks importlib's Python code each time);
    where Hermes' plugin module was never loaded, no thread can carry its marker.
    """
    return on_review_thread(sys.modules.get("hermes_cli.plugins"))


EXPAND_QUERY_TASK = "lcm_expand_query"  # config.yaml ``auxiliary.lcm_expand_query``


def query_expander(ctx: Any, config_file: HermesConfigFile) -> AuxiliaryCall | None:
    """Hermes' auxiliary model for ``lcm_expand_query``, when config.yaml (``config_file``)
    names one, else None.

    The task is declared to Hermes either way (``hermes model`` lists it, so it can be
    configured there); the tool is offered only once ``auxiliary.lcm_expand_query`` names
    a model (``HermesConfigFile.auxiliary_configured``): read at plugin load, so a change applies
    at the gateway's next start.
    """
    register_task(
        ctx,
        EXPAND_QUERY_TASK,
        "LCM query expansion",
        "rewrites a memory search into other wordings (lcm_expand_query)",
        {"provider": "auto", "timeout": 20},
    )
    if not config_file.auxiliary_configured(EXPAND_QUERY_TASK):
        return None
    return auxiliary_call(EXPAND_QUERY_TASK)
