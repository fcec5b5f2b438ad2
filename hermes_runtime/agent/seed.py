"""Seed ``config.yaml`` and ``SOUL.md`` from the chart without overwriting the user's edits.

Why not mount the chart's files directly: Hermes migrates ``config.yaml`` in place and users edit
both files from the agent itself, so they must live, writable, in the data dir. Why not copy on
every start: that would erase those edits. So the seed is applied as a three-way merge: the last
seed applied is kept under ``D/.hermes-runtime/``; on start, only what the chart changed since
then is applied, and only where the user has not changed the same key. Everything else the user
(or Hermes' migrations) wrote stays, comments included (ruamel round-trip).
"""

from __future__ import annotations

import io
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ruamel.yaml import YAML
from ruamel.yaml.error import YAMLError

from hermes_runtime.common.atomic import atomic_write_text
from hermes_runtime.common.errors import RuntimeFailure
from hermes_runtime.common.groupaccess import SHARED_FILE_MODE

STATE_DIR_NAME = ".hermes-runtime"
CONFIG_SEED_RECORD = "seed-config.yaml"
SOUL_SEED_RECORD = "seed-SOUL.md"
_MISSING = object()

KeyPath = tuple[str, ...]


@dataclass
class SeedResult:
    """What seeding did to one file; ``kept_user_keys`` are seed changes the user overrode."""

    target: Path
    action: str  # created | updated | unchanged | kept-user-edits | no-seed
    applied_keys: list[str] = field(default_factory=list)
    kept_user_keys: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {
            "target": str(self.target),
            "action": self.action,
            "applied_keys": self.applied_keys,
            "kept_user_keys": self.kept_user_keys,
        }


def _yaml() -> YAML:
    yaml = YAML()  # round-trip: keeps comments, key order and quoting
    yaml.preserve_quotes = True
    yaml.width = 4096
    return yaml


def _load_mapping(text: str, source: Path) -> Any:
    """Parse YAML whose top level must be a mapping (an empty file counts as an empty one)."""
    try:
        data = _yaml().load(text)
    except YAMLError as exc:
        raise RuntimeFailure(f"{source}: not valid YAML: {exc}") from exc
    if data is None:
        return _yaml().load("{}")
    if not isinstance(data, Mapping):
        raise RuntimeFailure(
            f"{source}: the top level must be a mapping, got {type(data).__name__}"
        )
    return data


def _dump(data: Any) -> str:
    buffer = io.StringIO()
    _yaml().dump(data, buffer)
    return buffer.getvalue()


def _plain(value: Any) -> Any:
    """Comment-free plain Python value, so that equality ignores formatting."""
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


def _get(mapping: Any, key: str) -> Any:
    if isinstance(mapping, Mapping) and key in mapping:
        return mapping[key]
    return _MISSING


def _same(a: Any, b: Any) -> bool:
    if a is _MISSING or b is _MISSING:
        return a is b
    return bool(_plain(a) == _plain(b))


@dataclass
class _MergeOutcome:
    applied: list[KeyPath] = field(default_factory=list)
    kept: list[KeyPath] = field(default_factory=list)


def _merge_into(user: Any, previous: Any, seed: Any, path: KeyPath, out: _MergeOutcome) -> None:
    """Apply to ``user`` (in place) each key that changed between ``previous`` and ``seed``.

    A key is applied when the user's value still equals the previous seed's (the user never
    touched it) or already equals the new seed's; otherwise the user's value wins. Mappings on
    all three sides are merged key by key; any other value (lists included) is one unit.
    """
    keys = [str(k) for k in seed] + [str(k) for k in previous if k not in seed]
    for key in keys:
        old, new, mine = _get(previous, key), _get(seed, key), _get(user, key)
        if _same(old, new):
            continue
        if all(isinstance(v, Mapping) for v in (new, mine)) and (
            old is _MISSING or isinstance(old, Mapping)
        ):
            _merge_into(mine, {} if old is _MISSING else old, new, (*path, key), out)
            continue
        if _same(mine, new):
            continue
        if _same(mine, old):
            if new is _MISSING:
                del user[key]
            else:
                user[key] = new
            out.applied.append((*path, key))
        else:
            out.kept.append((*path, key))


def _dotted(paths: list[KeyPath]) -> list[str]:
    return [".".join(p) for p in paths]


def _read_optional(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except UnicodeDecodeError as exc:
        raise RuntimeFailure(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None


def seed_config(seed_path: Path | None, target: Path, state_dir: Path) -> SeedResult:
    """Create or update ``target`` (``D/config.yaml``) from the chart's seed, keeping user edits."""
    seed_text = _read_optional(seed_path) if seed_path is not None else None
    if seed_text is None:
        return SeedResult(target, "no-seed")
    seed = _load_mapping(seed_text, seed_path or target)
    record = state_dir / CONFIG_SEED_RECORD
    user_text = _read_optional(target)
    if user_text is None:
        atomic_write_text(target, seed_text, mode=SHARED_FILE_MODE)
        atomic_write_text(record, seed_text, mode=SHARED_FILE_MODE)
        return SeedResult(target, "created", applied_keys=_dotted([(str(k),) for k in seed]))
    previous_text = _read_optional(record)
    if previous_text == seed_text:
        return SeedResult(target, "unchanged")
    # No record yet (config.yaml restored from a backup, or written by Hermes): treat every seed
    # key as new, so only keys the user's file lacks are added.
    previous = _load_mapping(previous_text or "{}", record)
    user = _load_mapping(user_text, target)
    outcome = _MergeOutcome()
    _merge_into(user, previous, seed, (), outcome)
    if outcome.applied:
        atomic_write_text(target, _dump(user), mode=SHARED_FILE_MODE)
    atomic_write_text(record, seed_text, mode=SHARED_FILE_MODE)
    action = "updated" if outcome.applied else ("kept-user-edits" if outcome.kept else "unchanged")
    return SeedResult(target, action, _dotted(outcome.applied), _dotted(outcome.kept))


def seed_soul(seed_path: Path | None, target: Path, state_dir: Path) -> SeedResult:
    """Create ``target`` (``D/SOUL.md``) from the seed, or replace it only if the user never
    edited it: free text has no keys to merge, so any user edit wins as a whole."""
    seed_text = _read_optional(seed_path) if seed_path is not None else None
    if seed_text is None:
        return SeedResult(target, "no-seed")
    record = state_dir / SOUL_SEED_RECORD
    user_text = _read_optional(target)
    previous_text = _read_optional(record)
    if user_text is None:
        atomic_write_text(target, seed_text, mode=SHARED_FILE_MODE)
        atomic_write_text(record, seed_text, mode=SHARED_FILE_MODE)
        return SeedResult(target, "created")
    if user_text == seed_text:
        if previous_text != seed_text:
            atomic_write_text(record, seed_text, mode=SHARED_FILE_MODE)
        return SeedResult(target, "unchanged")
    if previous_text is not None and user_text == previous_text:
        atomic_write_text(target, seed_text, mode=SHARED_FILE_MODE)
        atomic_write_text(record, seed_text, mode=SHARED_FILE_MODE)
        return SeedResult(target, "updated")
    if previous_text != seed_text:
        atomic_write_text(record, seed_text, mode=SHARED_FILE_MODE)
    return SeedResult(target, "kept-user-edits")
