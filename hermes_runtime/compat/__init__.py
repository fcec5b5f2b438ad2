"""Adapters for the Hermes internals hermes_runtime touches, one module per concern.

Each checks the installed ``hermes-agent`` version against the releases it was checked
against and the shape of the internal it uses, then refuses (``HermesIncompatible``) or
degrades with one ``hermes.compat.degraded`` log line that says what is lost:

- ``context_engine``: the ``ContextEngine`` ABC and plugin registration LCM uses (refused);
- ``background_review``: the thread marker of Hermes' background review fork (degraded:
  its turns may be stored);
- ``idempotency``: the API server's ``_idem_cache`` the durable cache replaces (degraded:
  Hermes keeps its in-memory cache);
- ``drain``: the external drain marker and status file of a quiesced restart (degraded:
  restart without holding new turns back);
- ``launch``: the command, env and exit code of the gateway (degraded: started anyway,
  with a warning);
- ``state_db``: the ``state.db`` columns LCM's import reads (the caller refuses);
- ``home``: Hermes' own answer for its home folder, for code in its process (degraded: the
  runtime's ``resolve_data_dir``);
- ``turn_outcome``: ``AIAgent.run_conversation``, wrapped so LCM sees a failed turn, which no
  hook reports (degraded: a turn whose model calls all failed is not kept in LCM).
- ``auxiliary``: ``agent.auxiliary_client.call_llm``, Hermes' auxiliary model, and the plugin
  call that declares an auxiliary task (degraded: ``lcm_expand_query`` is not offered).

The modules import Hermes only inside the functions that need it; importing this package
imports nothing of Hermes. docs/hermes-versions.md lists what is tested and accepted.
"""

from hermes_runtime.compat.auxiliary import AuxiliaryCall, auxiliary_call, register_task
from hermes_runtime.compat.background_review import on_review_thread, review_marker
from hermes_runtime.compat.context_engine import check_hooks, check_registration, engine_base
from hermes_runtime.compat.drain import DRAIN_MARKER, STATUS_FILE, DrainControl, drain_control
from hermes_runtime.compat.idempotency import (
    API_SERVER_MODULE,
    CACHE_GLOBAL,
    cache_problem,
    check_cache,
)
from hermes_runtime.compat.launch import (
    DRAIN_TIMEOUT_ENV,
    EXTERNAL_SUPERVISOR_ENV,
    GATEWAY_ARGS,
    HERMES_MAIN,
    MIN_API_KEY_LENGTH,
    RESPAWN_STORM_ENV,
    RESTART_EXIT_CODE,
    check_launch,
)
from hermes_runtime.compat.state_db import READ_COLUMNS, check_state_db, columns_problem
from hermes_runtime.compat.turn_outcome import FailedTurnObserver, observe_failed_turns
from hermes_runtime.compat.version import (
    ACCEPTS,
    DISTRIBUTION,
    TESTED_VERSION,
    Accepts,
    HermesIncompatible,
    Verdict,
    installed_version,
    parse_version,
    version_problem,
)

__all__ = [
    "ACCEPTS",
    "API_SERVER_MODULE",
    "CACHE_GLOBAL",
    "DISTRIBUTION",
    "DRAIN_MARKER",
    "DRAIN_TIMEOUT_ENV",
    "EXTERNAL_SUPERVISOR_ENV",
    "GATEWAY_ARGS",
    "HERMES_MAIN",
    "MIN_API_KEY_LENGTH",
    "READ_COLUMNS",
    "RESPAWN_STORM_ENV",
    "RESTART_EXIT_CODE",
    "STATUS_FILE",
    "TESTED_VERSION",
    "Accepts",
    "AuxiliaryCall",
    "DrainControl",
    "FailedTurnObserver",
    "HermesIncompatible",
    "Verdict",
    "auxiliary_call",
    "cache_problem",
    "check_cache",
    "check_hooks",
    "check_launch",
    "check_registration",
    "check_state_db",
    "columns_problem",
    "drain_control",
    "engine_base",
    "installed_version",
    "observe_failed_turns",
    "on_review_thread",
    "parse_version",
    "register_task",
    "review_marker",
    "version_problem",
]
