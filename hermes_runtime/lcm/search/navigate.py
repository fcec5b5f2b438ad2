"""Reading history back by id: describe, expand, read an output, the summary DAG, recent sessions.

Why a module of its own: search finds ids (``msg_N``, ``sum_N``, ``out_HEX``);
these calls turn an id into what the agent reads next, a page at a time
(a summary's sources, a character range of a large output), and name the
sessions worth searching. Bad ids get an error naming the id.
"""

from __future__ import annotations

from typing import Any

from hermes_runtime.common.errors import RuntimeFailure
from hermes_runtime.lcm.records import (
    MESSAGE_PREFIX,
    OUTPUT_PREFIX,
    SUMMARY_PREFIX,
    StoredMessage,
    Summary,
)
from hermes_runtime.lcm.search import searchreads
from hermes_runtime.lcm.store import dag, messagereads, sessions
from hermes_runtime.lcm.store import outputs as out
from hermes_runtime.lcm.store.lcmstore import LcmStore


def describe(store: LcmStore, ref: str) -> dict[str, Any]:
    """Metadata of a summary, message or output, without its full content."""
    kind, key = parse_ref(ref)
    if kind == "summary":
        summary = _require(dag.summary(store, int(key)), ref)
        return {
            **_identity(summary, kind),
            "depth": summary.depth,
            "tokens": summary.token_count,
            "source_tokens": summary.source_tokens,
            "escalation_level": summary.level,
            "seq_range": [summary.first_seq, summary.last_seq],
            "time_range": [summary.start_at, summary.end_at],
            "message_count": summary.message_count,
            "sources": dag.summary_source_count(store, summary.id),
            "content": summary.content,
        }
    if kind == "message":
        message = _require(messagereads.message(store, int(key)), ref)
        covered_by = searchreads.covered_by(store, message.id)
        return {
            **_identity(message, kind),
            "role": message.role,
            "seq": message.seq,
            "tokens": message.token_count,
            "output_id": message.output_id,
            "covered_by": covered_by,
        }
    record = _require(messagereads.output(store, ref), ref)
    return {"id": record.id, "kind": "output", "size": record.size, "encoding": record.encoding}


def _identity(item: StoredMessage | Summary, kind: str) -> dict[str, Any]:
    return {"id": item.ref, "kind": kind, "session_id": item.session_id}


def expand(store: LcmStore, ref: str, offset: int = 0, limit: int = 50) -> dict[str, Any]:
    """A summary's sources (paginated), a message in full, or an output in full."""
    kind, key = parse_ref(ref)
    if kind == "summary":
        summary = _require(dag.summary(store, int(key)), ref)
        total = dag.summary_source_count(store, summary.id)
        sources = dag.summary_sources(store, summary.id, max(0, offset), max(1, min(limit, 500)))
        return {
            "id": summary.ref,
            "kind": "summary",
            "total_sources": total,
            "offset": offset,
            "next_offset": offset + len(sources) if offset + len(sources) < total else None,
            "sources": [_source_payload(store, s) for s in sources],
        }
    if kind == "message":
        message = _require(messagereads.message(store, int(key)), ref)
        return {
            "id": message.ref,
            "kind": "message",
            "message": messagereads.full_message(store, message),
        }
    record = _require(messagereads.output(store, ref), ref)
    content = out.decode_content(messagereads.output_bytes(store, record), record.encoding)
    return {"id": record.id, "kind": "output", "content": content}


def read_output(store: LcmStore, ref: str, offset: int = 0, limit: int = 8000) -> dict[str, Any]:
    """A character range of an externalized output, for outputs too big to expand at once."""
    record = _require(messagereads.output(store, ref), ref)
    text = messagereads.output_bytes(store, record).decode("utf-8")
    offset = max(0, offset)
    chunk = text[offset : offset + max(1, min(limit, 100_000))]
    end = offset + len(chunk)
    return {
        "id": record.id,
        "total_chars": len(text),
        "offset": offset,
        "next_offset": end if end < len(text) else None,
        "content": chunk,
    }


def _source_payload(store: LcmStore, item: StoredMessage | Summary) -> dict[str, Any]:
    if isinstance(item, Summary):
        return {
            "id": item.ref,
            "kind": "summary",
            "depth": item.depth,
            "seq_range": [item.first_seq, item.last_seq],
            "content": item.content,
        }
    payload = {"id": item.ref, "kind": "message", "seq": item.seq, **item.to_openai()}
    if item.output_id:
        payload["output_id"] = item.output_id
    return payload


def parse_ref(ref: str) -> tuple[str, str]:
    ref = str(ref).strip()
    for prefix, kind in (
        (SUMMARY_PREFIX, "summary"),
        (MESSAGE_PREFIX, "message"),
        (OUTPUT_PREFIX, "output"),
    ):
        if ref.startswith(prefix) and len(ref) > len(prefix):
            key = ref[len(prefix) :]
            if kind != "output" and not key.isdigit():
                break
            return kind, key
    raise RuntimeFailure(
        f"LCM id {ref!r} is not a summary (sum_N), message (msg_N) or output (out_HEX) id"
    )


def _require(value: Any, ref: str) -> Any:
    if value is None:
        raise RuntimeFailure(f"LCM id {ref} does not exist in this database")
    return value


RECENT_SCAN_ROWS = 50_000  # newest messages read to find the most recently active sessions


def recent_activity(
    store: LcmStore, limit: int = 10, exclude: str | None = None
) -> list[dict[str, Any]]:
    """The sessions active most recently, newest first: size, span and last user words.

    Walks the newest messages backwards (rowid order, no scan of the history)
    until ``limit`` distinct sessions are found or ``RECENT_SCAN_ROWS`` were read.
    """
    limit = max(1, min(limit, 50))
    found = searchreads.newest_sessions(store, limit, exclude, RECENT_SCAN_ROWS)
    return [_session_activity(store, session_id) for session_id in found]


def _session_activity(store: LcmStore, session_id: str) -> dict[str, Any]:
    span = searchreads.session_span(store, session_id)
    last_user = searchreads.last_user_message(store, session_id)
    first_at, last_at, messages, summaries = span or (None, None, 0, 0)
    return {
        "session_id": session_id,
        "messages": messages,
        "summaries": summaries,
        "first_at": first_at,
        "last_at": last_at,
        "last_user_message": (
            {"id": f"{MESSAGE_PREFIX}{last_user[0]}", "text": last_user[1]} if last_user else None
        ),
    }


def summary_tree(
    store: LcmStore, ref: str | None, session_id: str | None, max_depth: int = 2
) -> dict[str, Any]:
    """The summary DAG: a summary's children (to ``max_depth`` levels), or a session's roots.

    Without ``ref``: the summaries in the session's live context, each with
    its children. Ids, depths, spans and sizes only; ``lcm_expand`` reads
    contents.
    """
    max_depth = max(0, min(max_depth, 5))
    if ref:
        kind, key = parse_ref(ref)
        if kind != "summary":
            raise RuntimeFailure(f"LCM id {ref}: the summary DAG starts at a summary (sum_N)")
        root = _require(dag.summary(store, int(key)), ref)
        return _tree_node(store, root, max_depth)
    if not session_id or not sessions.has_session(store, session_id):
        raise RuntimeFailure(f"LCM session {session_id!r} has no stored messages")
    items = dag.context_items(store, session_id)
    roots = [item.summary for item in items if item.summary is not None]
    return {
        "session_id": session_id,
        "context_items": len(items),
        "raw_messages_in_context": sum(1 for item in items if item.message is not None),
        "summaries": [_tree_node(store, s, max_depth) for s in roots],
    }


def _tree_node(store: LcmStore, summary: Summary, depth_left: int) -> dict[str, Any]:
    node: dict[str, Any] = {
        "id": summary.ref,
        "depth": summary.depth,
        "seq_range": [summary.first_seq, summary.last_seq],
        "message_count": summary.message_count,
        "tokens": summary.token_count,
        "sources": dag.summary_source_count(store, summary.id),
    }
    if depth_left > 0 and summary.depth > 0:
        children = [
            s for s in dag.summary_sources(store, summary.id, 0, 100) if isinstance(s, Summary)
        ]
        node["children"] = [_tree_node(store, child, depth_left - 1) for child in children]
    return node
