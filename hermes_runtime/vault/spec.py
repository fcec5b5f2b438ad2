"""``--secret 'PATH#KEY=ENV'``: which Vault field becomes which variable, and
``--out-only 'FILE=ENV,...'``: which variables go to which env file.

The CLI takes paths and names, never values, so no secret can appear in a
process's argument list. Several output files let one login serve several
consumers (the chart gives the agent, the backup, the restore and the
replication container each its own file on its own volume), so each file holds
only what its reader needs.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Annotated

from pydantic import AfterValidator, ConfigDict, Field, ValidationError
from pydantic.dataclasses import dataclass
from pydantic_core import ErrorDetails

from hermes_runtime.common.errors import RuntimeFailure
from hermes_runtime.vault.envfile import ENV_NAME

# The rules live on the records, so a spec built in code (a test, a benchmark) obeys them too.
# ENV_NAME is also the chart's vault.secrets[].env pattern (a chart test keeps them equal).
EnvName = Annotated[str, Field(pattern=ENV_NAME.pattern)]


def _api_path(value: str) -> str:
    if value.startswith("v1/"):
        raise ValueError("give the path without the leading 'v1/'")
    return value


@dataclass(frozen=True, config=ConfigDict(strict=True))
class SecretSpec:
    """One field to fetch: ``path`` is the API path (``secret/data/hermes`` for KV v2)."""

    path: Annotated[str, Field(min_length=1), AfterValidator(_api_path)]
    key: Annotated[str, Field(min_length=1)]
    env: EnvName

    def __str__(self) -> str:
        return f"{self.path}#{self.key}={self.env}"


def parse_secret_spec(text: str) -> SecretSpec:
    """Split ``PATH#KEY=ENV``: the path ends at the first ``#``, the name after the last ``=``."""
    path, hash_sign, rest = text.partition("#")
    key, equals, env = rest.rpartition("=")
    if not hash_sign or not equals:
        raise RuntimeFailure(f"--secret {text!r} is not of the form PATH#KEY=ENV")
    try:
        return SecretSpec(path=path.strip().strip("/"), key=key, env=env)
    except ValidationError as exc:
        raise RuntimeFailure(f"--secret {text!r}{_problem(exc.errors()[0])}") from None


def _problem(error: ErrorDetails) -> str:
    """The broken rule in the words of the flag's help (the caller names the flag's text)."""
    if error["type"] == "string_pattern_mismatch":  # an environment variable name
        return (
            f": {error['input']!r} is not a valid environment variable name "
            f"(must match {ENV_NAME.pattern})"
        )
    if error["type"] == "value_error":
        return f": {error['msg'].removeprefix('Value error, ')}"
    if error["type"] == "string_too_short":  # an empty PATH or KEY
        return " is not of the form PATH#KEY=ENV"
    where = ".".join(str(part) for part in error["loc"])
    return f": {where} {error['input']!r}: {error['msg']}"


def check_unique_env_names(specs: Iterable[SecretSpec]) -> None:
    """Two specs writing the same variable would silently drop one: refuse instead."""
    seen: dict[str, SecretSpec] = {}
    for spec in specs:
        if spec.env in seen:
            raise RuntimeFailure(
                f"--secret {spec} and --secret {seen[spec.env]} both set {spec.env}"
            )
        seen[spec.env] = spec


@dataclass(frozen=True)
class OutputFile:
    """One env file and the variables written to it; ``names`` None means every ``--secret``."""

    path: Path
    names: tuple[EnvName, ...] | None = None

    def select(self, specs: Sequence[SecretSpec]) -> list[SecretSpec]:
        """The specs this file gets, in ``--secret`` order."""
        if self.names is None:
            return list(specs)
        return [spec for spec in specs if spec.env in self.names]


def parse_output_spec(text: str) -> OutputFile:
    """Split ``FILE=ENV[,ENV...]`` at the LAST ``=`` (names cannot hold one, paths may).

    An empty list (``FILE=``) writes a file with no variable, so a consumer that
    sources its file always finds one.
    """
    path, equals, names_text = text.rpartition("=")
    if not equals or not path:
        raise RuntimeFailure(f"--out-only {text!r} is not of the form FILE=ENV[,ENV...]")
    names = tuple(name.strip() for name in names_text.split(",")) if names_text else ()
    try:
        return OutputFile(path=Path(path), names=names)
    except ValidationError as exc:
        raise RuntimeFailure(f"--out-only {text!r}{_problem(exc.errors()[0])}") from None


def check_outputs(specs: Sequence[SecretSpec], outputs: Sequence[OutputFile]) -> None:
    """Every file distinct, every listed name fetched, every fetched name written somewhere.

    A name listed for a file but never fetched would leave that reader without it;
    a secret fetched for no file is read from Vault for nothing: both are mistakes.
    """
    if not outputs:
        raise RuntimeFailure("no output file: give --out FILE or --out-only FILE=ENV,...")
    fetched = [spec.env for spec in specs]
    seen: set[Path] = set()
    written: set[str] = set()
    for output in outputs:
        if output.path in seen:
            raise RuntimeFailure(f"{output.path} is given as an output file twice")
        seen.add(output.path)
        for name in output.names if output.names is not None else fetched:
            if name not in fetched:
                raise RuntimeFailure(f"--out-only {output.path}: {name} is not set by any --secret")
            written.add(name)
    unused = [name for name in fetched if name not in written]
    if unused:
        raise RuntimeFailure(
            f"--secret for {', '.join(unused)} goes to no output file: "
            "add it to an --out-only list or drop the --secret"
        )
