"""Adapter: how Hermes' gateway is started, configured through its env, and how it exits.

Found in Hermes 0.19.0's source and unchanged in the v0.23 source: ``hermes_cli.main gateway
run`` runs the gateway in the foreground (and ``gateway/status.py`` recognises a gateway
process by that command line); ``API_SERVER_ENABLED/KEY/HOST/PORT`` enable its API server,
which refuses keys shorter than 16 characters; ``HERMES_GATEWAY_EXTERNAL_SUPERVISOR=1``
makes ``/restart`` and SIGUSR1 exit 75 for the supervisor to restart it;
``HERMES_RESTART_DRAIN_TIMEOUT`` is ``agent.restart_drain_timeout``;
``HERMES_GATEWAY_MAX_STARTS`` (0: off) is the respawn-storm breaker's limit;
``HERMES_HOME_MODE`` (octal) is the mode ``hermes_cli/config.py`` gives ``HERMES_HOME`` and the
folders it makes there (0700 without it), and ``HERMES_SKIP_CHMOD`` stops it narrowing
``config.yaml``, ``SOUL.md`` and ``.env`` to 0600 (``_secure_file``).

Nothing here can be checked without running Hermes, so only the version is: on a release
the adapter does not know, the gateway still starts (refusing would leave the pod without
its agent), and one ``hermes.compat.degraded`` line says which of these may not hold.
"""

from __future__ import annotations

from hermes_runtime.compat.version import Verdict, degrade, installed_version, verdict

HERMES_MAIN = "hermes_cli.main"
GATEWAY_ARGS = ("gateway", "run", "--replace")
RESTART_EXIT_CODE = 75  # gateway/restart.py GATEWAY_SERVICE_RESTART_EXIT_CODE
MIN_API_KEY_LENGTH = 16  # gateway/platforms/api_server.py refuses shorter keys
EXTERNAL_SUPERVISOR_ENV = "HERMES_GATEWAY_EXTERNAL_SUPERVISOR"
DRAIN_TIMEOUT_ENV = "HERMES_RESTART_DRAIN_TIMEOUT"
RESPAWN_STORM_ENV = "HERMES_GATEWAY_MAX_STARTS"
HOME_MODE_ENV = "HERMES_HOME_MODE"
SKIP_CHMOD_ENV = "HERMES_SKIP_CHMOD"
INTERNAL = (
    f"{HERMES_MAIN} {' '.join(GATEWAY_ARGS)} with API_SERVER_*, {EXTERNAL_SUPERVISOR_ENV}, "
    f"{DRAIN_TIMEOUT_ENV}, {RESPAWN_STORM_ENV}; exit {RESTART_EXIT_CODE} to be restarted"
)


def check_launch(version: str | None = None) -> Verdict:
    """The version the gateway is about to run, checked and, if unknown, logged as degraded."""
    found = verdict(INTERNAL, version or installed_version(), None)
    if not found.ok:
        degrade(
            found,
            "the gateway starts anyway; its API server settings, restart exit code, drain "
            "timeout or respawn breaker may be read differently by this Hermes",
        )
    return found
