"""The retrieval tools LCM gives the model: their schemas, and the call of each by name.

The schemas are data the host reads once (``hermes_plugin.py`` registers
them); ``dispatch`` answers a call with the store, embedder and vectors the
engine hands it (``LcmEngine.handle_tool`` adds the JSON, errors and metrics).
``lcm_expand_query`` needs the host's auxiliary model: ``offered_schemas`` leaves
it out when there is none, so a model never sees a tool that cannot answer.
"""

from __future__ import annotations

import copy
from typing import Any

from hermes_runtime.common.errors import RuntimeFailure
from hermes_runtime.lcm.compact.assembly import context_within
from hermes_runtime.lcm.embed.embedders import Embedder
from hermes_runtime.lcm.embed.vectorindex import VectorIndex
from hermes_runtime.lcm.engine import selfhelp
from hermes_runtime.lcm.engine.expandquery import MAX_QUERIES, Completion, expand_query
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
from hermes_runtime.lcm.store.timewindow import IdWindow, TimeWindow


def _integer(default: int) -> dict[str, Any]:
    return {"type": "integer", "default": default}


STRING: dict[str, Any] = {"type": "string"}
SCOPE: dict[str, Any] = {"type": "string", "enum": ["session", "all"], "default": "session"}
_WHEN = "ISO 8601 date or datetime (UTC unless it names a zone), or an age like 7d, 36h"
SINCE: dict[str, Any] = {"type": "string", "description": f"only what was said from then: {_WHEN}"}
UNTIL: dict[str, Any] = {
    "type": "string",
    "description": f"only what was said before then (a date includes that day): {_WHEN}",
}


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
            "since": SINCE,
            "until": UNTIL,
        },
        ("query",),
    ),
    _tool(
        "lcm_search",
        "Semantic + keyword search of past conversation (use when wording may differ). "
        "Returns ids to pass to lcm_expand; identical messages come back once, with "
        "their count and ids. since/until keep to a time span ('last week': since 7d).",
        {"query": STRING, "scope": SCOPE, "limit": _integer(8), "since": SINCE, "until": UNTIL},
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
    _tool(
        "lcm_status",
        "What your long-term memory holds: messages, sessions, summaries (DAG depth), "
        "externalized outputs, database size; how many items are embedded and how far "
        "behind the embedder is; how far this session is compacted.",
        {},
    ),
    _tool(
        "lcm_doctor",
        "Read-only health checks of your long-term memory (database file, full-text "
        "index, outputs on disk, embeddings, summaries): each ok or a problem, and what "
        "to do. Repairs nothing.",
        {},
    ),
    _tool(
        "lcm_expand_query",
        "Rewrite a question into other wordings with a helper model, search with each "
        "(as lcm_search) and merge the results: for facts lcm_search misses because "
        "they were worded differently. Each result names the queries that found it.",
        {
            "query": STRING,
            "count": {"type": "integer", "default": 3, "maximum": MAX_QUERIES},
            "scope": SCOPE,
            "limit": _integer(8),
            "since": SINCE,
            "until": UNTIL,
        },
        ("query",),
    ),
]
TOOL_NAMES = frozenset(t["name"] for t in TOOL_SCHEMAS)
AUXILIARY_TOOLS = frozenset({"lcm_expand_query"})  # offered only with an auxiliary model
TIMED_TOOLS = frozenset({"lcm_grep", "lcm_search", "lcm_expand_query"})  # since / until


def offered_schemas(auxiliary: bool) -> list[dict[str, Any]]:
    """The schemas a host offers: all, less those needing an auxiliary model it lacks."""
    return [copy.deepcopy(t) for t in TOOL_SCHEMAS if auxiliary or t["name"] not in AUXILIARY_TOOLS]


def dispatch(
    store: LcmStore,
    embedder: Embedder | None,
    vectors: VectorIndex,
    name: str,
    args: dict[str, Any],
    session_id: str | None,
    worker: bool = False,
    complete: Completion | None = None,
) -> Any:
    """The answer of the tool ``name`` to ``args``, called in ``session_id`` (a JSON value).

    ``scope: all`` searches every session; otherwise the calling session's.
    ``since``/``until`` name a time window (``timewindow.py``); a bad one is an error
    naming the parameter. ``worker``: an embedding worker runs in this process;
    ``complete``: the host's auxiliary model (``lcm_expand_query``).
    """
    scope = None if args.get("scope") == "all" else session_id
    ids: IdWindow | None = None
    if name in TIMED_TOOLS:
        window = TimeWindow.from_args(name, args)
        ids = window.ids(store) if window is not None else None
    if name == "lcm_grep":
        hits = grep(
            store,
            str(args["query"]),
            scope,
            int(args.get("limit", 10)),
            bool(args.get("regex", False)),
            window=ids,
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
            window=ids,
        )
        return {"results": [h.as_dict() for h in hits]}
    if name == "lcm_expand_query":
        if complete is None:
            raise RuntimeFailure("lcm_expand_query: no auxiliary model is configured")
        return expand_query(
            store,
            embedder,
            vectors,
            complete,
            str(args["query"]),
            scope,
            int(args.get("count", 3)),
            int(args.get("limit", 8)),
            ids,
        )
    if name == "lcm_status":
        return selfhelp.status(store, embedder, worker, session_id)
    if name == "lcm_doctor":
        return selfhelp.health(store, embedder, worker)
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
