"""Records the LCM engine passes around, and how a message maps to a row.

A message is kept byte-identical: known OpenAI keys go to their own columns
and every other key (Hermes adds a few, e.g. ``reasoning``) goes to ``extra``
as JSON, so ``to_openai`` rebuilds exactly the dict that was ingested.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from hermes_runtime.common.errors import RuntimeFailure

KNOWN_KEYS = ("role", "content", "tool_calls", "tool_call_id", "name")
MESSAGE_PREFIX, SUMMARY_PREFIX, OUTPUT_PREFIX = "msg_", "sum_", "out_"


def estimate_tokens(text: str | None) -> int:
    """About four characters a token: cheap, deterministic, model-agnostic.

    Exact tokenizers differ per model; compaction only needs a stable,
    conservative estimate, and the host reports real usage separately.
    """
    return (len(text) + 3) // 4 if text else 0


def message_text(message: dict[str, Any]) -> str:
    """The searchable text of a message: its content flattened to a string."""
    content = message.get("content")
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    return json.dumps(content, ensure_ascii=False, sort_keys=True)


def message_tokens(message: dict[str, Any]) -> int:
    tokens = 4 + estimate_tokens(message_text(message))
    if message.get("tool_calls"):
        tokens += estimate_tokens(json.dumps(message["tool_calls"], ensure_ascii=False))
    return tokens


class StoredMessage(NamedTuple):
    """One immutable message as stored (content may be a stub when externalized).

    A named tuple, not a frozen dataclass: one is built for every row of a
    context a compaction reads and for every message stored, and a frozen
    dataclass's ``__init__`` (an ``object.__setattr__`` per field) costs
    several times a tuple's, on the turn's path.
    """

    id: int
    session_id: str
    seq: int
    role: str
    content: str | None
    content_json: str | None
    tool_calls: str | None
    tool_call_id: str | None
    name: str | None
    extra: str | None
    output_id: str | None
    token_count: int
    created_at: float

    @property
    def ref(self) -> str:
        return f"{MESSAGE_PREFIX}{self.id}"

    def to_openai(self, full_content: Any = None) -> dict[str, Any]:
        """Rebuild the OpenAI message; ``full_content`` replaces an externalization stub."""
        message: dict[str, Any] = {"role": self.role}
        if full_content is not None:
            message["content"] = full_content
        elif self.content_json is not None:
            message["content"] = json.loads(self.content_json)
        else:
            message["content"] = self.content
        if self.tool_calls is not None:
            message["tool_calls"] = json.loads(self.tool_calls)
        if self.tool_call_id is not None:
            message["tool_call_id"] = self.tool_call_id
        if self.name is not None:
            message["name"] = self.name
        if self.extra:
            message.update(json.loads(self.extra))
        return message


class Summary(NamedTuple):
    """One immutable summary as stored (a named tuple: see ``StoredMessage``)."""

    id: int
    session_id: str
    depth: int
    content: str
    token_count: int
    source_tokens: int
    level: int
    first_seq: int
    last_seq: int
    start_at: float
    end_at: float
    message_count: int
    created_at: float

    @property
    def ref(self) -> str:
        return f"{SUMMARY_PREFIX}{self.id}"


@dataclass(frozen=True)
class OutputRecord:
    id: str
    sha256: str
    size: int
    encoding: str
    relpath: str
    created_at: float


@dataclass
class ContextItem:
    """One slot of a session's live context: a raw message or a summary."""

    position: int
    message: StoredMessage | None = None
    summary: Summary | None = None

    @property
    def tokens(self) -> int:
        if self.message is not None:
            return self.message.token_count
        assert self.summary is not None
        return self.summary.token_count + SUMMARY_HEADER_TOKENS

    @property
    def is_summary(self) -> bool:
        return self.summary is not None


SUMMARY_HEADER_TOKENS = 40


def validate_session_id(session_id: str) -> None:
    """Refuse a session id that is not a string of 1-256 characters (the field, quoted)."""
    if not isinstance(session_id, str) or not session_id or len(session_id) > 256:
        raise RuntimeFailure(f"LCM session id must be 1-256 characters, got {session_id!r}")


# What the host holds: JSON text as stored, or the dict a sync made (encoded at commit,
# once a batch per session: the hook does not pay a JSON encoding per turn).
HostState = str | dict[str, Any]


@dataclass
class Job:
    """One ingest: prepared rows of one session, and the host state saved with them
    (written at once, or queued by group commit: ``writebehind.py``)."""

    session_id: str
    rows: list[dict[str, Any]]
    stamp: float
    host_state: HostState | None = None
    replay_window: float = 0.0
    merged: int = 0  # messages the sync collapsed as a host-merged replay (metrics)
    ticket: int = 0
    stored: list[Any] = field(default_factory=list)
