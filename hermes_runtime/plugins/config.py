"""Keep ``plugins.enabled`` in Hermes' ``config.yaml`` in step with the spec.

Hermes loads a directory plugin only if it is named in ``plugins.enabled``.
The user edits the same file, so it is round-tripped with ruamel.yaml
(comments, order and other settings survive) and written atomically. Only
names this bootstrapper manages are added or removed; every other entry is
the user's and stays where it is.
"""

from __future__ import annotations

import contextlib
import io
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap, CommentedSeq
from ruamel.yaml.error import CommentMark, YAMLError
from ruamel.yaml.tokens import CommentToken
from ruamel.yaml.util import load_yaml_guess_indent

from hermes_runtime.common.atomic import atomic_write_text
from hermes_runtime.common.errors import RuntimeFailure


def _yaml(text: str = "") -> YAML:
    """A round-trip YAML that writes with the indentation the file already uses
    (Hermes itself writes PyYAML's style: two spaces, list dashes not indented)."""
    yaml = YAML(typ="rt")
    yaml.preserve_quotes = True
    sequence, offset = 2, 0
    if text.strip():
        with contextlib.suppress(YAMLError, TypeError, AttributeError):
            _, guessed_sequence, guessed_offset = load_yaml_guess_indent(text)
            sequence = guessed_sequence or 2
            offset = guessed_offset or 0
    yaml.indent(mapping=2, sequence=sequence, offset=offset)
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
    if not isinstance(existing, CommentedSeq):
        plugins["enabled"] = CommentedSeq(names)
        return
    tail = _detach_trailing_lines(existing)
    for index in reversed(range(len(existing))):
        if existing[index] not in names:
            del existing[index]
    for name in names:
        if name not in existing:
            existing.append(name)
    _attach_trailing_lines(existing, tail)


def _detach_trailing_lines(seq: CommentedSeq) -> str:
    """ruamel hangs the lines after a list (comments, blank lines) on its last item;
    take them off so removing or appending items does not lose or misplace them."""
    if not seq:
        return ""
    entry = seq.ca.items.get(len(seq) - 1)
    token = entry[0] if entry else None
    if token is None or "\n" not in token.value:
        return ""
    own, _, tail = token.value.partition("\n")
    token.value = own + "\n"
    return tail


def _attach_trailing_lines(seq: CommentedSeq, tail: str) -> None:
    if not tail or not seq:
        return
    last = len(seq) - 1
    entry = seq.ca.items.get(last)
    if entry and entry[0] is not None:
        entry[0].value += tail
    else:
        seq.ca.items[last] = [CommentToken("\n" + tail, CommentMark(0), None), None, None, None]


def _write(path: Path, document: Any) -> None:
    buffer = io.StringIO()
    try:
        original = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        original = ""
    _yaml(original).dump(document, buffer)
    mode = _existing_mode(path)
    atomic_write_text(path, buffer.getvalue(), mode=mode)


def _existing_mode(path: Path) -> int:
    try:
        return os.stat(path).st_mode & 0o7777
    except FileNotFoundError:
        return 0o644
