"""Keep ``plugins.enabled`` in Hermes' ``config.yaml`` in step with the spec.

Hermes loads a directory plugin only if it is named in ``plugins.enabled``.
The user edits the same file, so it is round-tripped with ruamel.yaml
(comments, order and other settings survive) and written atomically. Only
names this bootstrapper manages are added or removed; every other entry is
the user's and stays where it is.
"""

from __future__ import annotations

import io
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap, CommentedSeq
from ruamel.yaml.error import YAMLError

from hermes_runtime.common.atomic import atomic_write_text
from hermes_runtime.common.errors import RuntimeFailure


def _yaml() -> YAML:
    yaml = YAML(typ="rt")
    yaml.preserve_quotes = True
    yaml.indent(mapping=2, sequence=4, offset=2)
    return yaml


def load_config(path: Path) -> Any:
    """Parse ``config.yaml`` (round-trip); a missing file is an empty mapping."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return CommentedMap()
    except (OSError, UnicodeDecodeError) as exc:
        raise RuntimeFailure(f"{path}: cannot read: {exc}") from exc
    try:
        document = _yaml().load(text)
    except YAMLError as exc:
        raise RuntimeFailure(f"{path}: invalid YAML: {exc}") from exc
    if document is None:
        return CommentedMap()
    if not isinstance(document, dict):
        raise RuntimeFailure(f"{path}: top level must be a mapping")
    _enabled_list(path, document)
    return document


def apply_enabled(
    path: Path,
    document: Any,
    managed: Iterable[str],
    desired: Mapping[str, bool],
) -> bool:
    """Set membership of each managed name in ``plugins.enabled``; write if it changed.

    ``desired[name]`` says whether a managed plugin must be listed; a managed
    name absent from ``desired`` keeps its current membership (a plugin that
    failed this round keeps what it had). Returns whether the file changed.
    """
    current = _enabled_list(path, document)
    managed_set = set(managed)
    old = [str(item) for item in current]
    new = [item for item in old if item not in managed_set or desired.get(item, True)]
    for name, wanted in desired.items():
        if wanted and name not in new:
            new.append(name)
    if new == old and _has_enabled_key(document):
        return False
    _store_enabled(document, new)
    _write(path, document)
    return True


def _has_enabled_key(document: Any) -> bool:
    plugins = document.get("plugins")
    return isinstance(plugins, dict) and "enabled" in plugins


def _enabled_list(path: Path, document: Any) -> list[Any]:
    plugins = document.get("plugins")
    if plugins is None:
        return []
    if not isinstance(plugins, dict):
        raise RuntimeFailure(f"{path}: field 'plugins' must be a mapping")
    enabled = plugins.get("enabled")
    if enabled is None:
        return []
    if not isinstance(enabled, list):
        raise RuntimeFailure(f"{path}: field 'plugins.enabled' must be a list")
    return list(enabled)


def _store_enabled(document: Any, names: list[str]) -> None:
    plugins = document.get("plugins")
    if not isinstance(plugins, dict):
        plugins = CommentedMap()
        document["plugins"] = plugins
    existing = plugins.get("enabled")
    if isinstance(existing, CommentedSeq):
        existing[:] = names
    else:
        plugins["enabled"] = CommentedSeq(names)


def _write(path: Path, document: Any) -> None:
    buffer = io.StringIO()
    _yaml().dump(document, buffer)
    mode = _existing_mode(path)
    atomic_write_text(path, buffer.getvalue(), mode=mode)


def _existing_mode(path: Path) -> int:
    try:
        return os.stat(path).st_mode & 0o7777
    except FileNotFoundError:
        return 0o644
