"""Secrets from Vault/OpenBao into env files (optionally kept fresh) or a child process.

Public surface: render once or as a refresher (one file, or one per reader with
only its variables), exec a command with the
secrets, and read the env file back (the agent entrypoint uses
:func:`read_env_file` to load ``HERMES_RUNTIME_SECRETS_ENV``). The refresher notes each
outcome beside the files it keeps (:func:`read_refresh_status`: the agent's /metrics).

Each name loads its module on first use (``common/lazyexports.py``): the agent's entrypoint
reads the env file and the refresh record and must not hold hvac and requests for them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from hermes_runtime.common.lazyexports import lazy_exports

if TYPE_CHECKING:
    from hermes_runtime.vault.auth import AUTH_METHODS, DEFAULT_JWT_FILE, TOKEN_ENV, VaultSettings
    from hermes_runtime.vault.envfile import (
        format_env_file,
        parse_env_text,
        read_env_file,
        write_env_file,
    )
    from hermes_runtime.vault.execute import exec_with_secrets
    from hermes_runtime.vault.refreshstatus import (
        RefreshStatus,
        read_refresh_status,
        record_refresh,
        refresh_status_path,
    )
    from hermes_runtime.vault.render import RenderResult, render_files, render_once, run_refresh
    from hermes_runtime.vault.spec import (
        OutputFile,
        SecretSpec,
        parse_output_spec,
        parse_secret_spec,
    )

_HOMES = {
    "AUTH_METHODS": "auth",
    "DEFAULT_JWT_FILE": "auth",
    "TOKEN_ENV": "auth",
    "VaultSettings": "auth",
    "format_env_file": "envfile",
    "parse_env_text": "envfile",
    "read_env_file": "envfile",
    "write_env_file": "envfile",
    "exec_with_secrets": "execute",
    "RefreshStatus": "refreshstatus",
    "read_refresh_status": "refreshstatus",
    "record_refresh": "refreshstatus",
    "refresh_status_path": "refreshstatus",
    "RenderResult": "render",
    "render_files": "render",
    "render_once": "render",
    "run_refresh": "render",
    "OutputFile": "spec",
    "SecretSpec": "spec",
    "parse_output_spec": "spec",
    "parse_secret_spec": "spec",
}

__all__ = [
    "AUTH_METHODS",
    "DEFAULT_JWT_FILE",
    "TOKEN_ENV",
    "OutputFile",
    "RefreshStatus",
    "RenderResult",
    "SecretSpec",
    "VaultSettings",
    "exec_with_secrets",
    "format_env_file",
    "parse_env_text",
    "parse_output_spec",
    "parse_secret_spec",
    "read_env_file",
    "read_refresh_status",
    "record_refresh",
    "refresh_status_path",
    "render_files",
    "render_once",
    "run_refresh",
    "write_env_file",
]

__getattr__ = lazy_exports(__name__, _HOMES)
