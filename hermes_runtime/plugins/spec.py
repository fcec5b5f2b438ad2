"""The plugin spec file: which git-synced repositories become Hermes plugins.

Format (the chart renders it into a ConfigMap)::

    plugins:
      - name: weather        # required, ^[a-z0-9][a-z0-9_-]{0,62}$
        subPath: ""          # optional: the plugin's folder inside the repository
        enabled: true        # optional, default true: listed in plugins.enabled

A file that cannot be read or parsed is a ``RuntimeFailure`` naming the file
and line, raised before anything is changed. A well-formed file whose entries
break a rule yields ``SpecEntry`` records carrying an ``error``: one bad entry
must not stop the others from being linked.
"""

from __future__ import annotations

import posixpath
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ruamel.yaml import YAML
from ruamel.yaml.error import MarkedYAMLError, YAMLError

from hermes_runtime.common.errors import RuntimeFailure

NAME_PATTERN = re.compile(r"^[a-z0-9][a-z0-9_-]{0,62}$")
ALLOWED_KEYS = frozenset({"name", "subPath", "enabled"})


@dataclass(frozen=True)
class SpecEntry:
    """One ``plugins[]`` item; ``error`` is set when the entry breaks a rule."""

    name: str
    sub_path: str = ""
    enabled: bool = True
    line: int = 0
    error: str | None = None

    @property
    def valid_name(self) -> bool:
        return bool(NAME_PATTERN.match(self.name))


def load_spec(path: Path) -> list[SpecEntry]:
    """Read and check the spec file; raise ``RuntimeFailure`` if it does not parse."""
    text = _read_spec_text(path)
    document = _parse_yaml(path, text)
    items = _plugin_items(path, document)
    entries: list[SpecEntry] = []
    seen: set[str] = set()
    for index, item in enumerate(items):
        entry = _entry_from_item(path, items, index, item)
        if entry.error is None and entry.name in seen:
            entry = _with_error(entry, f"duplicate plugin name {entry.name!r}")
        seen.add(entry.name)
        entries.append(entry)
    return entries


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


def _entry_from_item(path: Path, items: Any, index: int, item: Any) -> SpecEntry:
    line = _item_line(items, index)
    where = f"plugin spec {path} line {line}"
    if not isinstance(item, dict):
        return SpecEntry(name=f"#{index}", line=line, error=f"{where}: entry must be a mapping")
    raw_name = item.get("name")
    name = raw_name if isinstance(raw_name, str) else f"#{index}"
    entry = SpecEntry(name=name, line=line)
    unknown = sorted(str(key) for key in item if key not in ALLOWED_KEYS)
    if unknown:
        return _with_error(entry, f"{where}: unknown field(s) {', '.join(unknown)}")
    if not isinstance(raw_name, str) or not NAME_PATTERN.match(raw_name):
        return _with_error(entry, f"{where}: field 'name' must match {NAME_PATTERN.pattern}")
    raw_sub_path = item.get("subPath", "")
    if raw_sub_path is None:
        raw_sub_path = ""
    if not isinstance(raw_sub_path, str):
        return _with_error(entry, f"{where}: field 'subPath' must be a string")
    try:
        sub_path = normalize_sub_path(raw_sub_path)
    except ValueError as exc:
        return _with_error(entry, f"{where}: field 'subPath': {exc}")
    enabled = item.get("enabled", True)
    if not isinstance(enabled, bool):
        return _with_error(entry, f"{where}: field 'enabled' must be true or false")
    return SpecEntry(name=name, sub_path=sub_path, enabled=enabled, line=line)


def _with_error(entry: SpecEntry, error: str) -> SpecEntry:
    return SpecEntry(entry.name, entry.sub_path, entry.enabled, entry.line, error)


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
