"""The retrieval tools LCM gives the model: their schemas, and the call of each by name.

The schemas are data the host reads once (``hermes_plugin.py`` registers
them); ``dispatch`` answers a call with the store, embedder and vectors the
engine hands it (``LcmEngine.handle_tool`` adds the JSON, errors and metrics).
"""

from __future__ import annotations

import copy
from typing import Any

from hermes_runtime.common.errors import RuntimeFailure
from hermes_runtime.lcm.compact.assembly import context_within
from hermes_runtime.lcm.embed.embedders import Embedder
from hermes_runtime.lcm.embed.vectorindex import VectorIndex
from hermes_runtime.lcm.search.hybrid import hybrid_search
from hermes_runtime.lcm.search.navigate import (
    describe,
    expand,
    read_output,
    recent_activity,
    summary_tree,
)
from hermes_runtime.lcm.search.textsearch import grep
from hermes_runtime.lcm.store.lcmstore import LcmStore


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


def dispatch(
    store: LcmStore,
    embedder: Embedder | None,
    vectors: VectorIndex,
    name: str,
    args: dict[str, Any],
    session_id: str | None,
) -> Any:
    """The answer of the tool ``name`` to ``args``, called in ``session_id`` (a JSON value).

    ``scope: all`` searches every session; otherwise the calling session's.
    """
    scope = None if args.get("scope") == "all" else session_id
    if name == "lcm_grep":
        hits = grep(
            store,
            str(args["query"]),
            scope,
            int(args.get("limit", 10)),
            bool(args.get("regex", False)),
        )
        return {"results": [h.as_dict() for h in hits]}
    if name == "lcm_search":
        hits = hybrid_search(
            store,
            embedder,
            str(args["query"]),
            scope,
            int(args.get("limit", 8)),
            index=vectors,
        )
        return {"results": [h.as_dict() for h in hits]}
    if name == "lcm_describe":
        return describe(store, str(args["id"]))
    if name == "lcm_expand":
        return expand(
            store, str(args["id"]), int(args.get("offset", 0)), int(args.get("limit", 20))
        )
    if name == "lcm_read_output":
        return read_output(
            store,
            str(args["id"]),
            int(args.get("offset", 0)),
            int(args.get("limit", 8000)),
        )
    if name == "lcm_recent":
        found = recent_activity(store, int(args.get("limit", 10)), session_id)
        return {"sessions": found}
    if name == "lcm_load_session":
        budget = max(100, min(int(args.get("budget", 4000)), 32_000))
        return context_within(store, str(args["session_id"]), budget)
    if name == "lcm_dag":
        ref = str(args["id"]) if args.get("id") else None
        return summary_tree(store, ref, session_id, int(args.get("max_depth", 2)))
    raise RuntimeFailure(f"unknown LCM tool {name!r}")
