"""The retrieval tools LCM gives the model: their schemas, as Hermes registers them.

Why a module of its own: the schemas are data the host reads once
(``hermes_plugin.py`` registers them); the engine only dispatches a call by
name (``LcmEngine.handle_tool``).
"""

from __future__ import annotations

import copy
from typing import Any


def _integer(default: int) -> dict[str, Any]:
    return {"type": "integer", "default": default}


STRING: dict[str, Any] = {"type": "string"}
SCOPE: dict[str, Any] = {"type": "string", "enum": ["session", "all"], "default": "session"}


def _tool(
    name: str, description: str, properties: dict[str, Any], required: tuple[str, ...] = ()
) -> dict[str, Any]:
    """One tool's schema in the shape Hermes registers (a JSON-schema object of parameters)."""
    # A copy: the shared property shapes (STRING, SCOPE) stay apart in what the host holds.
    parameters: dict[str, Any] = {"type": "object", "properties": copy.deepcopy(properties)}
    if required:
        parameters["required"] = list(required)
    return {"name": name, "description": description, "parameters": parameters}


TOOL_SCHEMAS: list[dict[str, Any]] = [
    _tool(
        "lcm_grep",
        "Full-text search of the whole conversation history, including parts folded "
        "into summaries. Returns message/summary ids to pass to lcm_expand; identical "
        "messages come back once, with their count and ids.",
        {
            "query": {"type": "string", "description": "words to find (all must match)"},
            "scope": SCOPE,
            "regex": {
                "type": "boolean",
                "default": False,
                "description": (
                    "query is an RE2 regular expression (no backreferences or lookaround)"
                ),
            },
            "limit": _integer(10),
        },
        ("query",),
    ),
    _tool(
        "lcm_search",
        "Semantic + keyword search of past conversation (use when wording may differ). "
        "Returns ids to pass to lcm_expand; identical messages come back once, with "
        "their count and ids.",
        {"query": STRING, "scope": SCOPE, "limit": _integer(8)},
        ("query",),
    ),
    _tool(
        "lcm_describe",
        "Metadata of a summary (sum_N), message (msg_N) or output (out_HEX).",
        {"id": STRING},
        ("id",),
    ),
    _tool(
        "lcm_expand",
        "Expand a summary id into its sources (paginated), or return a message or "
        "externalized output in full.",
        {"id": STRING, "offset": _integer(0), "limit": _integer(20)},
        ("id",),
    ),
    _tool(
        "lcm_read_output",
        "Read a character range of an externalized output (out_HEX).",
        {"id": STRING, "offset": _integer(0), "limit": _integer(8000)},
        ("id",),
    ),
    _tool(
        "lcm_recent",
        "The conversations (sessions) active most recently, other than this one: "
        "size, time span and the last user message. Use to pick up work from another "
        "session, then lcm_load_session or lcm_grep with scope all.",
        {"limit": _integer(10)},
    ),
    _tool(
        "lcm_load_session",
        "Another session's stored context (its summaries and newest messages) within "
        "a token budget, newest first; ids expand with lcm_expand.",
        {"session_id": STRING, "budget": _integer(4000)},
        ("session_id",),
    ),
    _tool(
        "lcm_dag",
        "The summary DAG: with id (sum_N), that summary's child summaries down to "
        "max_depth levels; without, the summaries in this session's live context. "
        "Ids, depths, message spans and sizes only (lcm_expand reads contents).",
        {"id": STRING, "max_depth": _integer(2)},
    ),
]
TOOL_NAMES = frozenset(t["name"] for t in TOOL_SCHEMAS)
