"""The plugin spec file: which git-synced repositories become Hermes plugins.

Format (the chart renders it into a ConfigMap)::

    defaults:                # optional
      maxSizeMiB: 100        # optional, default 100: the size cap of every plugin
    plugins:
      - name: weather        # required, ^[a-z0-9][a-z0-9_-]{0,48}$ (NAME_PATTERN)
        subPath: ""          # optional: the plugin's folder inside the repository
        enabled: true        # optional, default true: listed in plugins.enabled
        maxSizeMiB: 100      # optional: bytes of files in the worktree, at most (MiB)

A file that cannot be read or parsed is a ``RuntimeFailure`` naming the file
and line, raised before anything is changed. A well-formed file whose entries
break a rule yields ``SpecEntry`` records carrying an ``error``: one bad entry
must not stop the others from being linked.
"""

from __future__ import annotations

import dataclasses
import posixpath
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, ValidationError
from pydantic_core import ErrorDetails
from ruamel.yaml import YAML
from ruamel.yaml.error import MarkedYAMLError, YAMLError

from hermes_runtime.common.errors import RuntimeFailure

# Kubernetes names a container with a DNS label (RFC 1123): at most 63 characters. The chart
# names each plugin's git-sync container after it, `git-sync-<name>-init` at the longest
# (templates/_gitsync.tpl), so a name has 63 - 14 = 49 characters. values.schema.json states the
# same pattern (plugins[].name); tests/chart/test_chart_runtime_rules.py keeps the two equal.
CONTAINER_NAME_MAX = 63
NAME_MAX_LENGTH = CONTAINER_NAME_MAX - len("git-sync-") - len("-init")
NAME_PATTERN = re.compile(rf"^[a-z0-9][a-z0-9_-]{{0,{NAME_MAX_LENGTH - 1}}}$")
# A repository is untrusted input: one too big for a plugin (a vendored model, a data
# dump) is refused rather than imported by every gateway start. 100 MiB of files holds
# any reasonable plugin with its vendored dependencies.
DEFAULT_MAX_SIZE_MIB = 100


@dataclass(frozen=True)
class SpecEntry:
    """One ``plugins[]`` item; ``error`` is set when the entry breaks a rule."""

    name: str
    sub_path: str = ""
    enabled: bool = True
    line: int = 0
    error: str | None = None
    max_size_mib: int = DEFAULT_MAX_SIZE_MIB

    @property
    def max_bytes(self) -> int:
        return self.max_size_mib * 1024 * 1024

    @property
    def valid_name(self) -> bool:
        return bool(NAME_PATTERN.fullmatch(self.name))


def normalize_sub_path(raw: str) -> str:
    """Return the subPath in canonical form, or raise ``ValueError`` saying why it escapes.

    A subPath must stay inside the repository: no absolute path, no ``..``
    component, no ``.git`` component (git internals are never a plugin).
    """
    if "\x00" in raw or "\\" in raw:
        raise ValueError("subPath must not contain NUL or backslash characters")
    if raw.startswith("/"):
        raise ValueError("subPath must be relative to the repository, not absolute")
    parts = [part for part in raw.split("/") if part not in ("", ".")]
    if ".." in parts:
        raise ValueError("subPath must not contain '..'")
    if ".git" in parts:
        raise ValueError("subPath must not point into '.git'")
    return posixpath.join(*parts) if parts else ""


def _none_as_empty(value: Any) -> Any:
    return "" if value is None else value


SizeMiB = Annotated[int, Field(ge=1)]
SubPath = Annotated[str, BeforeValidator(_none_as_empty), AfterValidator(normalize_sub_path)]


class SpecItem(BaseModel):
    """The rules of one ``plugins[]`` item, as the file spells it (strict: YAML is typed)."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    name: str = Field(pattern=NAME_PATTERN.pattern)
    subPath: SubPath = ""  # camelCase: the file's keys, as the chart renders them
    enabled: bool = True
    maxSizeMiB: SizeMiB = DEFAULT_MAX_SIZE_MIB


class SpecDefaults(BaseModel):
    """The rules of ``defaults:``: what every plugin gets unless it says otherwise."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    maxSizeMiB: SizeMiB = DEFAULT_MAX_SIZE_MIB


# What each field must be, in the words of an error message (the rule itself is above).
FIELD_RULES = {
    "name": f"must match {NAME_PATTERN.pattern}",
    "subPath": "must be a string",
    "enabled": "must be true or false",
    "maxSizeMiB": "must be an integer >= 1",
}


def load_spec(path: Path) -> list[SpecEntry]:
    """Read and check the spec file; raise ``RuntimeFailure`` if it does not parse."""
    text = _read_spec_text(path)
    document = _parse_yaml(path, text)
    items = _plugin_items(path, document)
    default_cap = _default_max_size(path, document)
    entries: list[SpecEntry] = []
    seen: set[str] = set()
    for index, item in enumerate(items):
        entry = _entry_from_item(path, items, index, item, default_cap)
        if entry.error is None and entry.name in seen:
            entry = _with_error(entry, f"duplicate plugin name {entry.name!r}")
        seen.add(entry.name)
        entries.append(entry)
    return entries


def _read_spec_text(path: Path) -> str:
    try:
        return Path(path).read_text(encoding="utf-8")
    except FileNotFoundError as exc:
        raise RuntimeFailure(f"plugin spec {path}: file not found") from exc
    except (OSError, UnicodeDecodeError) as exc:
        raise RuntimeFailure(f"plugin spec {path}: cannot read: {exc}") from exc


def _parse_yaml(path: Path, text: str) -> Any:
    yaml = YAML(typ="rt")
    try:
        return yaml.load(text)
    except MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f" line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = exc.problem or exc.context or "invalid YAML"
        raise RuntimeFailure(f"plugin spec {path}{where}: {problem}") from exc
    except YAMLError as exc:
        raise RuntimeFailure(f"plugin spec {path}: invalid YAML: {exc}") from exc


def _plugin_items(path: Path, document: Any) -> list[Any]:
    if document is None:
        return []
    if not isinstance(document, dict):
        raise RuntimeFailure(
            f"plugin spec {path} line 1: top level must be a mapping with 'plugins'"
        )
    items = document.get("plugins")
    if items is None:
        return []
    if not isinstance(items, list):
        line = _key_line(document, "plugins")
        raise RuntimeFailure(f"plugin spec {path} line {line}: 'plugins' must be a list")
    return items


def _default_max_size(path: Path, document: Any) -> int:
    """``defaults.maxSizeMiB``; a bad one fails the whole spec (it is every plugin's)."""
    defaults = document.get("defaults") if isinstance(document, dict) else None
    if defaults is None:
        return DEFAULT_MAX_SIZE_MIB
    where = f"plugin spec {path} line {_key_line(document, 'defaults')}"
    if not isinstance(defaults, dict):
        raise RuntimeFailure(f"{where}: 'defaults' must be a mapping")
    try:
        return SpecDefaults.model_validate(defaults).maxSizeMiB
    except ValidationError as exc:
        problem = _problem(exc.errors(), "in 'defaults': ", "defaults.")
        raise RuntimeFailure(f"{where}: {problem}") from None


def _entry_from_item(path: Path, items: Any, index: int, item: Any, default_cap: int) -> SpecEntry:
    line = _item_line(items, index)
    where = f"plugin spec {path} line {line}"
    if not isinstance(item, dict):
        return SpecEntry(name=f"#{index}", line=line, error=f"{where}: entry must be a mapping")
    raw_name = item.get("name")
    name = raw_name if isinstance(raw_name, str) else f"#{index}"
    try:
        checked = SpecItem.model_validate({"maxSizeMiB": default_cap, **item})
    except ValidationError as exc:
        error = f"{where}: {_problem(exc.errors(), '', '')}"
        return SpecEntry(name=name, line=line, error=error)
    return SpecEntry(name, checked.subPath, checked.enabled, line, max_size_mib=checked.maxSizeMiB)


def _problem(errors: list[ErrorDetails], unknown_in: str, prefix: str) -> str:
    """The first broken rule, unknown keys before all: a typo explains what follows it."""
    strays = ("extra_forbidden", "invalid_key")  # a key not in the model, or not even a string
    unknown = sorted(str(e["loc"][0]) for e in errors if e["type"] in strays)
    if unknown:
        return f"unknown field(s) {unknown_in}{', '.join(unknown)}"
    first = errors[0]
    key = str(first["loc"][0]) if first["loc"] else ""
    if first["type"] == "value_error":  # normalize_sub_path said why
        return f"field '{prefix}{key}': {first['msg'].removeprefix('Value error, ')}"
    rule = FIELD_RULES.get(key, first["msg"])
    given = "nothing" if first["type"] == "missing" else repr(first["input"])
    return f"field '{prefix}{key}' {rule}, got {given}"


def _with_error(entry: SpecEntry, error: str) -> SpecEntry:
    return dataclasses.replace(entry, error=error)


def _item_line(items: Any, index: int) -> int:
    try:
        return int(items.lc.item(index)[0]) + 1
    except (AttributeError, KeyError, IndexError, TypeError):
        return 0


def _key_line(mapping: Any, key: str) -> int:
    try:
        return int(mapping.lc.key(key)[0]) + 1
    except (AttributeError, KeyError, TypeError):
        return 0
