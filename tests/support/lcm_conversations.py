"""Conversation builders and the lossless check shared by LCM tests.

``reconstruct`` walks an assembled context the way the agent would: every
summary is expanded (recursively, page by page) and every externalization
stub is read back, so comparing its result with what was ingested proves
that nothing was lost and every byte comes back.
"""

from __future__ import annotations

import base64
import re
from pathlib import Path
from typing import Any

from hermes_runtime.lcm.compact.assembly import summary_refs_of
from hermes_runtime.lcm.compact.policy import CompactionPolicy
from hermes_runtime.lcm.config import LcmConfig
from hermes_runtime.lcm.host.hermes_plugin import LcmContextEngine
from hermes_runtime.lcm.search.navigate import expand
from hermes_runtime.lcm.store.lcmstore import LcmStore
from hermes_runtime.lcm.store.schema import fetch_one

OUTPUT_REF = re.compile(r"^\[LCM externalized \w+ output (out_[0-9a-f]+):")


SYSTEM = {"role": "system", "content": "You are Hermes."}
# A policy that compacts a few dozen short messages: summaries in tests of any size.
SMALL_POLICY = CompactionPolicy(
    fresh_tail_messages=4,
    leaf_chunk_tokens=400,
    leaf_target_tokens=80,
    condense_fanout=3,
    condense_target_tokens=120,
    call_timeout_seconds=0.5,
    deadline_seconds=5.0,
)


def make_hermes_engine(tmp_path: Path, **section: Any) -> LcmContextEngine:
    """The Hermes-facing engine on a fresh home, bound to session-1 (no embeddings)."""
    config = LcmConfig.for_home(tmp_path, {"embeddings": "off", **section})
    engine = LcmContextEngine(config)
    engine.update_model("fake-model", 20_000)
    engine.on_session_start("session-1")
    return engine


def tool_turn(
    index: int, question: str, results: list[str], answer: str = ""
) -> list[dict[str, Any]]:
    """A user question, an assistant asking for tools, their results, a final answer."""
    calls = [
        {
            "id": f"call_{index}_{n}",
            "type": "function",
            "function": {"name": "lookup", "arguments": f'{{"n": {n}}}'},
        }
        for n in range(len(results))
    ]
    turn: list[dict[str, Any]] = [{"role": "user", "content": question}]
    if results:
        turn.append({"role": "assistant", "content": None, "tool_calls": calls})
        turn += [
            {"role": "tool", "tool_call_id": call["id"], "content": result}
            for call, result in zip(calls, results, strict=True)
        ]
    turn.append({"role": "assistant", "content": answer or f"answer {index}"})
    return turn


def simple_conversation(turns: int, filler: int = 20) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = []
    for i in range(turns):
        results = [f"result {i} " + "data " * filler] if i % 2 else []
        messages += tool_turn(i, f"question {i} about topic{i} " + "words " * filler, results)
    return messages


def blob(size: int) -> str:
    return base64.b64encode(bytes(range(256)) * (size // 256 + 1)).decode()[:size]


def expand_summary(store: LcmStore, ref: str) -> list[dict[str, Any]]:
    """Every original message under a summary, in order, page by page."""
    messages: list[dict[str, Any]] = []
    offset: int | None = 0
    while offset is not None:
        page = expand(store, ref, offset=offset, limit=7)
        for source in page["sources"]:
            if source["kind"] == "summary":
                messages += expand_summary(store, source["id"])
            else:
                messages.append(expand(store, source["id"])["message"])
        offset = page["next_offset"]
    return messages


def reconstruct(store: LcmStore, context: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The full history reachable from an assembled context."""
    history: list[dict[str, Any]] = []
    for message in context:
        content = message.get("content")
        refs = summary_refs_of(store, message)
        if refs is not None:
            for ref in refs:
                history += expand_summary(store, ref)
            continue
        stub = OUTPUT_REF.match(content) if isinstance(content, str) else None
        if stub and _is_stored_stub(store, stub.group(1), str(content)):
            full = expand(store, stub.group(1))["content"]
            message = {**message, "content": full}
        history.append(message)
    return history


def _is_stored_stub(store: LcmStore, output_id: str, content: str) -> bool:
    """A stub only if the database holds this exact stub (users can type anything)."""
    row = fetch_one(
        store.conn,
        "SELECT 1 FROM messages WHERE output_id = ? AND content = ? LIMIT 1",
        (output_id, content),
    )
    return row is not None
