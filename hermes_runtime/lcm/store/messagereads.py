"""Reads of stored messages and their externalized outputs: the SQL, in one place.

Why a module of its own: messages are written by the store's write path
only (``LcmStore.ingest_many``); reading one back, its output's metadata or
its content as ingested needs nothing of the writer but its connection.
Reads go through ``store.conn``, which commits queued turns first, so a
reader sees every message a turn hook queued before it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from hermes_runtime.common.errors import RuntimeFailure
from hermes_runtime.lcm.records import OutputRecord, StoredMessage
from hermes_runtime.lcm.store import outputs as out
from hermes_runtime.lcm.store.schema import fetch_one, fetch_value

if TYPE_CHECKING:
    from hermes_runtime.lcm.store.lcmstore import LcmStore

MESSAGE_COLUMNS = (
    "id, session_id, seq, role, content, content_json, tool_calls, tool_call_id, name, extra, "
    "output_id, token_count, created_at"
)


def message(store: LcmStore, message_id: int) -> StoredMessage | None:
    row = fetch_one(
        store.conn, f"SELECT {MESSAGE_COLUMNS} FROM messages WHERE id = ?", (message_id,)
    )
    return StoredMessage(*row) if row else None


def output(store: LcmStore, output_id: str) -> OutputRecord | None:
    row = fetch_one(
        store.conn,
        "SELECT id, sha256, size, encoding, relpath, created_at FROM outputs WHERE id = ?",
        (output_id,),
    )
    return OutputRecord(*row) if row else None


def output_bytes(store: LcmStore, record: OutputRecord) -> bytes:
    path = store.outputs_dir / record.relpath
    try:
        return path.read_bytes()
    except OSError as exc:
        raise RuntimeFailure(f"LCM output {record.id}: cannot read {path}: {exc}") from exc


def full_message(store: LcmStore, stored: StoredMessage) -> dict[str, Any]:
    """The message exactly as ingested, an externalized content read back from disk."""
    if stored.output_id is None:
        return stored.to_openai()
    record = output(store, stored.output_id)
    if record is None:
        raise RuntimeFailure(f"LCM message {stored.ref}: output {stored.output_id} missing")
    return stored.to_openai(out.decode_content(output_bytes(store, record), record.encoding))


def top_id(store: LcmStore, table: str) -> int:
    """The highest id of ``messages`` or ``summaries`` (their ids are dense: rows stay)."""
    return int(fetch_value(store.conn, f"SELECT coalesce(max(id), 0) FROM {table}") or 0)
