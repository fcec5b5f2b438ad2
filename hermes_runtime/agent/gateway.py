"""How to start the Hermes gateway in the foreground with its API server, and with which env.

Found in Hermes 0.19.0's source: ``hermes gateway run`` runs the gateway in the foreground;
``gateway/config.py`` enables the API server platform from ``API_SERVER_ENABLED`` /
``API_SERVER_KEY`` / ``API_SERVER_HOST`` / ``API_SERVER_PORT``; ``gateway/restart.py`` treats
``HERMES_GATEWAY_EXTERNAL_SUPERVISOR=1`` as "a supervisor owns me", so a ``/restart`` makes the
gateway exit 75 for us to restart it instead of spawning a detached copy of itself;
``hermes_cli/gateway.py`` (``run_gateway``) sleeps before it binds once more than
``gateway.respawn_storm.max_starts`` starts landed in its window, unless
``HERMES_GATEWAY_MAX_STARTS`` is 0. Those names live in the adapter ``compat/launch.py``
(the gateway process logs when the installed Hermes is not a release it knows). A stop
sends the gateway SIGINT, which Hermes counts as intentional (``run.py``'s
``shutdown_signal_handler``).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from pathlib import Path

from hermes_runtime import compat  # Hermes' launch contract: names that check its version
from hermes_runtime.agent.settings import AgentSettings
from hermes_runtime.common.errors import RuntimeFailure
from hermes_runtime.compat.launch import HOME_MODE_ENV, SKIP_CHMOD_ENV
from hermes_runtime.vault import read_env_file

__all__ = [
    "gateway_command",
    "gateway_env",
    "read_api_key_file",
    "read_secrets_env",
]


# Hermes makes its folders in HERMES_HOME 0700 and config.yaml, SOUL.md and .env 0600 at every
# start, which would shut out ``replicate`` and ``backup`` (other UIDs, the pod's group:
# common/groupaccess.py). Its own switches keep the group's access instead; setgid (2770)
# keeps new files in the fsGroup where the volume set it. Files Hermes creates 0600 by itself
# (auth.json, MCP tokens) are credential stores the backup leaves out.
GROUP_SHARING_ENV = {HOME_MODE_ENV: "2770", SKIP_CHMOD_ENV: "1"}


def gateway_command() -> list[str]:
    """The foreground gateway, run by the same interpreter that runs hermes_runtime.

    Hermes' ``hermes_cli.main`` behind our ``gateway_main``, which installs the durable
    idempotency cache (``idempotency.py``) first."""
    return [
        sys.executable,
        "-m",
        "hermes_runtime.agent.gateway_main",
        compat.HERMES_MAIN,
        *compat.GATEWAY_ARGS,
    ]


def read_secrets_env(path: Path) -> dict[str, str]:
    """The rendered secrets env file (``vault render`` output), parsed by the vault package."""
    return dict(read_env_file(path))


def read_api_key_file(path: Path) -> str:
    """The API key from its file (``HERMES_RUNTIME_API_KEY_FILE``, a Secret's volume)."""
    try:
        key = path.read_text(encoding="utf-8").strip()
    except OSError as exc:
        raise RuntimeFailure(
            f"API key file {path} (HERMES_RUNTIME_API_KEY_FILE): {exc.strerror}"
        ) from None
    if not key:
        raise RuntimeFailure(f"API key file {path} (HERMES_RUNTIME_API_KEY_FILE) is empty")
    return key


def gateway_env(settings: AgentSettings, base: Mapping[str, str] | None = None) -> dict[str, str]:
    """The gateway's environment: ours, plus the secrets file, plus the API server settings.

    Values from the secrets file override the container's env (they are the rotated ones); the
    API key file overrides the env and is overridden by the secrets file. The API server key
    must come from somewhere Hermes reads: env, key file, secrets file or ``D/.env``.
    """
    env = dict(os.environ if base is None else base)
    if settings.api_key_file is not None:
        env["API_SERVER_KEY"] = read_api_key_file(settings.api_key_file)
    if settings.secrets_env is not None:
        env.update(read_secrets_env(settings.secrets_env))
    env.update(
        {
            "HERMES_HOME": str(settings.data_dir),
            "HOME": env.get("HOME") or str(settings.home_dir),
            "API_SERVER_ENABLED": "true",
            "API_SERVER_HOST": settings.gateway_address[0],
            "API_SERVER_PORT": str(settings.gateway_address[1]),
            compat.EXTERNAL_SUPERVISOR_ENV: "1",
            # agent.restart_drain_timeout (an explicit value in config.yaml still wins):
            # Hermes' default 0 interrupted every in-flight turn on SIGTERM.
            compat.DRAIN_TIMEOUT_ENV: f"{settings.drain_timeout:g}",
            "PYTHONUNBUFFERED": "1",
        }
    )
    # Hermes' respawn-storm breaker off, unless the operator set it (agent.env): see
    # compat.RESPAWN_STORM_ENV.
    env.setdefault(compat.RESPAWN_STORM_ENV, "0")
    env.update(GROUP_SHARING_ENV)
    if not env.get("API_SERVER_KEY") and not _dotenv_defines(
        settings.data_dir / ".env", "API_SERVER_KEY"
    ):
        raise RuntimeFailure(
            "API_SERVER_KEY is not set: the Hermes API server (port "
            f"{settings.api_port}) refuses to start without it; put it in the secrets env file "
            f"(HERMES_RUNTIME_SECRETS_ENV={settings.secrets_env}) or {settings.data_dir / '.env'}"
        )
    key = env.get("API_SERVER_KEY", "")
    if key and len(key) < compat.MIN_API_KEY_LENGTH:
        # Hermes would only log this and keep running without its API server.
        raise RuntimeFailure(
            f"API_SERVER_KEY is shorter than {compat.MIN_API_KEY_LENGTH} characters: the Hermes "
            "API server refuses guessable keys (generate one with `openssl rand -hex 32`)"
        )
    return env


# Hermes' respawn-storm breaker counts every gateway start in ``$HERMES_HOME/gateway-starts.log``
# (on the data volume) and, past 5 in 120 s, sleeps 10, 20, 40 ... s before it binds its port.
# Here every pod replacement (rollout, delete, eviction) and every restart in place (plugins,
# secrets, crash) is such a start, so a few healthy hand-overs and restarts within two minutes
# would each wait out the breaker's growing sleep: an outage the pod did nothing to earn. Crash
# loops are bounded already, by the supervisor's ``CrashPolicy`` and then the kubelet's
# back-off. The variable wins over config.yaml in Hermes: set it in the container's env to
# turn the breaker back on. (compat.RESPAWN_STORM_ENV: compat/launch.py.)


def _dotenv_defines(path: Path, name: str) -> bool:
    """Whether Hermes' own ``.env`` assigns a non-empty value to ``name``."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        return False
    for line in lines:
        key, sep, value = line.strip().removeprefix("export ").partition("=")
        if sep and key.strip() == name and value.strip().strip("'\""):
            return True
    return False
