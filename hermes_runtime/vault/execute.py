"""``vault exec``: run a command with the secrets in its environment.

For images that cannot read an env file. The process replaces itself
(``execvpe``), so the secrets live only in the child's environment, never in
its arguments or on disk. ``VAULT_TOKEN`` is removed from the child's
environment: the child needs the secrets, not the key to all of them.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence

from hermes_runtime.common.errors import RuntimeFailure
from hermes_runtime.vault.auth import TOKEN_ENV, VaultSettings, login
from hermes_runtime.vault.secrets import SecretCache
from hermes_runtime.vault.spec import SecretSpec, check_unique_env_names


def child_environment(
    settings: VaultSettings, specs: list[SecretSpec], environ: Mapping[str, str]
) -> dict[str, str]:
    """The parent's environment minus ``VAULT_TOKEN``, plus every requested secret."""
    check_unique_env_names(specs)
    session = login(settings, environ)
    values = SecretCache().fetch(session.client, specs, settings.addr)
    child = {name: value for name, value in environ.items() if name != TOKEN_ENV}
    child.update(values)
    return child


def exec_with_secrets(
    settings: VaultSettings,
    specs: list[SecretSpec],
    command: Sequence[str],
    environ: Mapping[str, str] | None = None,
) -> None:
    """Replace this process with ``command``; returns only by raising RuntimeFailure."""
    if not command:
        raise RuntimeFailure("vault exec needs a command after '--'")
    env = child_environment(settings, specs, os.environ if environ is None else environ)
    try:
        os.execvpe(command[0], list(command), env)
    except FileNotFoundError:
        raise RuntimeFailure(f"command {command[0]!r} not found on PATH") from None
    except PermissionError:
        raise RuntimeFailure(f"command {command[0]!r} is not executable") from None
