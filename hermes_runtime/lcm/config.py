"""LCM settings: defaults, the ``lcm:`` section of Hermes' config.yaml, and validation.

Validation happens once, at start-up, with messages that name the field and the
value, so a typo in config.yaml fails loudly instead of silently using a default.

Two classes, two jobs: ``LcmConfig`` is the record the engine reads (its fields
carry the defaults), ``LcmSection`` holds every rule a value must meet (type,
range, allowed names), once. The chart's values.schema.json states the same
ranges for the values it renders into the section; tests/chart compares them.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError, model_validator
from pydantic_core import ErrorDetails

from hermes_runtime.common.errors import RuntimeFailure
from hermes_runtime.lcm.compact.policy import CompactionPolicy

EMBEDDERS = ("e5", "static", "openai", "off")  # docs/benchmarks.md


@dataclass(frozen=True)
class LcmConfig:
    """Everything the engine needs; ``for_home`` reads the ``lcm:`` config section."""

    db_path: Path
    outputs_dir: Path
    threshold_percent: float = 0.75
    target_percent: float = 0.5
    externalize_chars: int = 16_000
    policy: CompactionPolicy = field(default_factory=CompactionPolicy)
    summary_base_url: str = ""  # empty: the agent's own model endpoint
    summary_model: str = ""
    summary_api_key: str = ""
    embeddings: str = "e5"  # one of EMBEDDERS
    embeddings_base_url: str = ""
    embeddings_model: str = ""
    embeddings_dim: int = 0
    # The agent frees the embedding model after this many seconds without a call (0: never).
    embeddings_idle_release_seconds: float = 300.0
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
        """This config with ``section``'s keys (config.yaml spelling) applied and checked."""
        if not isinstance(section, dict):
            raise RuntimeFailure(f"config.yaml lcm: must be a mapping, got {section!r}")
        checked = _check({**self._flat(), **section})
        policy_names = {f.name for f in fields(CompactionPolicy)}
        values = checked.model_dump()
        policy = CompactionPolicy(**{k: v for k, v in values.items() if k in policy_names})
        own = {k: v for k, v in values.items() if k not in policy_names}
        return LcmConfig(**own, policy=policy)

    def validate(self) -> None:
        """Raise ``RuntimeFailure`` naming the first field that breaks a rule of ``LcmSection``."""
        _check(self._flat())

    def _flat(self) -> dict[str, Any]:
        """The fields as config.yaml spells them: the policy's knobs beside the others."""
        own = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "policy"}
        return {**own, **asdict(self.policy)}


@dataclass(frozen=True)
class HermesConfigFile:
    """Hermes' ``home/config.yaml``, read once: what LCM's start asks of it.

    The plugin's registration asks three questions (is an auxiliary model named, which
    embedder, is LCM selected) and the engine a fourth (its section): one reading answers
    all, so they cannot disagree about a file edited in between. ``error``: why the file
    could not be read or parsed (None: read, or absent).
    """

    home: Path
    data: dict[str, Any]
    error: Exception | None = None

    @classmethod
    def read(cls, home: Path) -> HermesConfigFile:
        """The file as a mapping ({} when absent or not a mapping)."""
        from ruamel.yaml import YAML, YAMLError  # only the host process and the probe read it

        path = home / "config.yaml"
        try:
            if not path.exists():
                return cls(home, {})
            data = YAML(typ="safe").load(path.read_text(encoding="utf-8")) or {}
        except (OSError, ValueError, YAMLError) as exc:
            return cls(home, {}, exc)
        return cls(home, data if isinstance(data, dict) else {})

    def lcm_section(self) -> dict[str, Any]:
        """The ``lcm:`` mapping ({} when absent or not a mapping); the read's error, raised."""
        if self.error is not None:
            raise self.error
        section = self.data.get("lcm")
        return section if isinstance(section, dict) else {}

    def lcm_config(self) -> LcmConfig:
        """The engine's settings from the ``lcm:`` section (``RuntimeFailure`` on a bad key)."""
        return LcmConfig.for_home(self.home, self.lcm_section())

    def auxiliary_configured(self, task: str) -> bool:
        """Whether the file names a model for Hermes' auxiliary task ``task``.

        Named: its ``auxiliary.<task>`` section sets a ``base_url``, a ``model``, or a
        ``provider`` other than ``auto``. Why not Hermes' ``auto``: it falls back to the
        agent's own model, and a tool that spends a second call of that model on every use
        must be asked for. A file that cannot be read names none.
        """
        auxiliary = self.data.get("auxiliary")
        section = auxiliary.get(task) if isinstance(auxiliary, dict) else None
        if not isinstance(section, dict):
            return False
        provider = str(section.get("provider") or "").strip().lower()
        named = (str(section.get(key) or "").strip() for key in ("base_url", "model"))
        return provider not in ("", "auto") or any(named)

    def selected(self) -> LcmConfig | None:
        """LCM's settings when the file selects it (``context.engine: lcm``), else None.

        Why one reading for both questions: the pod's readiness probe and the plugin must
        agree on where ``lcm.db`` is (``lcm.db_path`` moves it). A file that cannot be
        read or parsed selects nothing (Hermes itself reports it); a bad ``lcm:`` section
        raises ``RuntimeFailure`` naming the key, as the engine would.
        """
        context = self.data.get("context")
        if self.error is not None or not (
            isinstance(context, dict) and context.get("engine") == "lcm"
        ):
            return None
        return self.lcm_config()


def selected_config(home: Path) -> LcmConfig | None:
    """``HermesConfigFile.selected`` of ``home``'s file, read now (the readiness probe asks
    at every probe: a config.yaml edited since the start counts)."""
    return HermesConfigFile.read(home).selected()


def _expand_path(value: Any) -> Any:
    """``$VAR`` in a path is expanded, as Hermes does for its own paths."""
    return value if isinstance(value, Path) else Path(os.path.expandvars(str(value)))


ExpandedPath = Annotated[Path, BeforeValidator(_expand_path)]


class LcmSection(BaseModel):
    """The rules of the ``lcm:`` section, one line a setting (defaults live in ``LcmConfig``).

    Lax typing, as YAML hands over: ``"false"``/``"no"``/``"off"`` are False, ``"0.5"`` is
    0.5; a whole number where a fraction would be lost (``3.7`` for an int) is refused.
    """

    model_config = ConfigDict(
        extra="forbid", allow_inf_nan=False, coerce_numbers_to_str=True, frozen=True
    )

    db_path: ExpandedPath
    outputs_dir: ExpandedPath
    threshold_percent: float = Field(ge=0.05, le=0.98)
    target_percent: float = Field(ge=0.02, le=0.97)  # and below threshold_percent
    externalize_chars: int = Field(ge=1_000)
    summary_base_url: str
    summary_model: str
    summary_api_key: str = Field(repr=False)
    embeddings: Literal["e5", "static", "openai", "off"]
    embeddings_base_url: str = Field(pattern=r"^$|^https?://")
    embeddings_model: str
    embeddings_dim: int = Field(ge=0)
    embeddings_idle_release_seconds: float = Field(ge=0, le=86_400)
    import_hermes_state: bool
    replay_window_seconds: float = Field(ge=0, le=86_400)
    commit_interval_ms: int = Field(ge=0, le=10_000)
    # CompactionPolicy's knobs (a test keeps this list equal to its fields)
    fresh_tail_messages: int = Field(ge=0)
    leaf_chunk_tokens: int
    leaf_target_tokens: int = Field(ge=32)
    condense_fanout: int = Field(ge=2)
    condense_target_tokens: int
    call_timeout_seconds: float = Field(gt=0)
    deadline_seconds: float

    @model_validator(mode="after")
    def _relations(self) -> LcmSection:
        if self.target_percent >= self.threshold_percent:
            raise ValueError(
                f"lcm.target_percent: value {self.target_percent!r} must be below "
                f"lcm.threshold_percent ({self.threshold_percent!r})"
            )
        if self.embeddings == "openai" and not (self.embeddings_model and self.embeddings_dim):
            raise ValueError(
                "lcm.embeddings_model and lcm.embeddings_dim are required "
                "when lcm.embeddings is 'openai'"
            )
        return self


def _check(values: dict[str, Any]) -> LcmSection:
    try:
        return LcmSection.model_validate(values)
    except ValidationError as exc:
        raise RuntimeFailure(_message(exc.errors()[0])) from None


# pydantic's error types for a value of the wrong kind, by the kind the field wants
_KIND_ERRORS = {
    "int": ("int_type", "int_parsing", "int_from_float"),
    "float": ("float_type", "float_parsing", "finite_number"),
    "bool": ("bool_type", "bool_parsing"),
    "str": ("string_type",),
}


def _message(error: ErrorDetails) -> str:
    """One line naming the key and the value: what an operator fixes in config.yaml."""
    if not error["loc"]:  # a rule between fields: its message names them
        return f"config.yaml {error['msg'].removeprefix('Value error, ')}"
    name = f"config.yaml lcm.{'.'.join(str(part) for part in error['loc'])}"
    value = error["input"]
    if error["loc"] == ("summary_api_key",):
        value = "<hidden>"  # a secret never reaches a log
    if error["type"] in ("extra_forbidden", "invalid_key"):
        return f"{name}: unknown setting"
    for kind, types in _KIND_ERRORS.items():
        if error["type"] in types:
            return f"{name}: expected {kind}, got {value!r} ({error['msg']})"
    if error["type"] in ("literal_error", "string_pattern_mismatch"):
        return f"{name}: value {value!r} not allowed ({error['msg']})"
    return f"{name}: value {value!r} out of range ({error['msg']})"
