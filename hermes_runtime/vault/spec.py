"""``--secret 'PATH#KEY=ENV'``: which Vault field becomes which variable.

The CLI takes paths and names, never values, so no secret can appear in a
process's argument list.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from hermes_runtime.common.errors import RuntimeFailure
from hermes_runtime.vault.envfile import ENV_NAME


@dataclass(frozen=True)
class SecretSpec:
    """One field to fetch: ``path`` is the API path (``secret/data/hermes`` for KV v2)."""

    path: str
    key: str
    env: str

    def __str__(self) -> str:
        return f"{self.path}#{self.key}={self.env}"


def parse_secret_spec(text: str) -> SecretSpec:
    """Split ``PATH#KEY=ENV``: the path ends at the first ``#``, the name after the last ``=``."""
    path, hash_sign, rest = text.partition("#")
    key, equals, env = rest.rpartition("=")
    path = path.strip().strip("/")
    if not hash_sign or not equals or not path or not key:
        raise RuntimeFailure(f"--secret {text!r} is not of the form PATH#KEY=ENV")
    if path.startswith("v1/"):
        raise RuntimeFailure(f"--secret {text!r}: give the path without the leading 'v1/'")
    if not ENV_NAME.match(env):
        raise RuntimeFailure(
            f"--secret {text!r}: {env!r} is not a valid environment variable name "
            f"(must match {ENV_NAME.pattern})"
        )
    return SecretSpec(path=path, key=key, env=env)


def check_unique_env_names(specs: Iterable[SecretSpec]) -> None:
    """Two specs writing the same variable would silently drop one: refuse instead."""
    seen: dict[str, SecretSpec] = {}
    for spec in specs:
        if spec.env in seen:
            raise RuntimeFailure(
                f"--secret {spec} and --secret {seen[spec.env]} both set {spec.env}"
            )
        seen[spec.env] = spec
