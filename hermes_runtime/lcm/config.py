"""LCM settings: defaults, the ``lcm:`` section of Hermes' config.yaml, and validation.

Validation happens once, at start-up, with messages that name the field,
so a typo in config.yaml fails loudly instead of silently using a default.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from hermes_runtime.common.errors import RuntimeFailure
from hermes_runtime.lcm.compaction import CompactionPolicy


@dataclass(frozen=True)
class LcmConfig:
    """Everything the engine needs; ``from_mapping`` reads the ``lcm:`` config section."""

    db_path: Path
    outputs_dir: Path
    threshold_percent: float = 0.75
    target_percent: float = 0.5
    externalize_chars: int = 16_000
    policy: CompactionPolicy = field(default_factory=CompactionPolicy)
    summary_base_url: str = ""  # empty: the agent's own model endpoint
    summary_model: str = ""
    summary_api_key: str = ""
    embeddings: str = "e5"  # e5 | static | openai | off (docs/benchmarks.md)
    embeddings_base_url: str = ""
    embeddings_model: str = ""
    embeddings_dim: int = 0
    import_hermes_state: bool = True  # day one: archive state.db's history, searchable
    # A user turn replayed by a retry within this many seconds is stored once (0: off).
    replay_window_seconds: float = 120.0
    # > 0: the gateway's turn hook queues each turn and one thread commits the queue in one
    # transaction at most this often (group commit). Off by default: a turn acknowledged in the
    # last interval before a crash reaches lcm.db only when its conversation goes on. docs/lcm.md.
    commit_interval_ms: int = 0

    @classmethod
    def for_home(cls, hermes_home: Path | str, section: dict[str, Any] | None = None) -> LcmConfig:
        home = Path(hermes_home)
        base = cls(db_path=home / "lcm.db", outputs_dir=home / "outputs")
        return base.with_mapping(section or {})

    def with_mapping(self, section: dict[str, Any]) -> LcmConfig:
        if not isinstance(section, dict):
            raise RuntimeFailure("config.yaml lcm: must be a mapping")
        own = {f.name: f for f in fields(self)}
        policy_fields = {f.name for f in fields(CompactionPolicy)}
        changes: dict[str, Any] = {}
        policy_changes: dict[str, Any] = {}
        for key, value in section.items():
            if key in policy_fields:
                policy_changes[key] = _coerce(f"lcm.{key}", value, type(getattr(self.policy, key)))
            elif key in own and key != "policy":
                current = getattr(self, key)
                kind = Path if isinstance(current, Path) else type(current)
                changes[key] = _coerce(f"lcm.{key}", value, kind)
            else:
                raise RuntimeFailure(f"config.yaml lcm.{key}: unknown setting")
        config = replace(self, **changes, policy=replace(self.policy, **policy_changes))
        config.validate()
        return config

    def validate(self) -> None:
        checks = [
            ("threshold_percent", 0.05 <= self.threshold_percent <= 0.98),
            ("target_percent", 0.02 <= self.target_percent < self.threshold_percent),
            ("externalize_chars", self.externalize_chars >= 1_000),
            ("embeddings", self.embeddings in ("e5", "static", "openai", "off")),
            ("fresh_tail_messages", self.policy.fresh_tail_messages >= 0),
            ("condense_fanout", self.policy.condense_fanout >= 2),
            ("leaf_target_tokens", self.policy.leaf_target_tokens >= 32),
            ("call_timeout_seconds", self.policy.call_timeout_seconds > 0),
            ("replay_window_seconds", 0 <= self.replay_window_seconds <= 86_400),
            ("commit_interval_ms", 0 <= self.commit_interval_ms <= 10_000),
        ]
        for name, ok in checks:
            if not ok:
                value = getattr(self, name, None)
                if value is None:
                    value = getattr(self.policy, name)
                raise RuntimeFailure(f"config.yaml lcm.{name}: value {value!r} out of range")
        if self.embeddings == "openai" and not (self.embeddings_model and self.embeddings_dim):
            raise RuntimeFailure(
                "config.yaml lcm.embeddings_model and lcm.embeddings_dim are required "
                "when lcm.embeddings is 'openai'"
            )


def _coerce(name: str, value: Any, kind: type) -> Any:
    try:
        if kind is bool:
            return bool(value)
        if kind is Path:
            return Path(os.path.expandvars(str(value)))
        return kind(value)
    except (TypeError, ValueError) as exc:
        raise RuntimeFailure(
            f"config.yaml {name}: expected {kind.__name__}, got {value!r}"
        ) from exc
