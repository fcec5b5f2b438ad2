"""Sessions and host-session bindings: their SQL, beside the store that writes messages.

Why a module of its own: a session row is created by the store's write path
(with its first message, ``LcmStore._ensure_session``) and its counters and
host state are written there; everything else about sessions (which exist,
which host id continues which session, the host state as JSON) is a plain
read or a one-statement write that needs only a connection.
"""

from __future__ import annotations

import json
import time
from typing import TYPE_CHECKING, Any

from hermes_runtime.lcm.records import validate_session_id
from hermes_runtime.lcm.store.schema import fetch_one, fetch_value

if TYPE_CHECKING:
    from hermes_runtime.lcm.store.lcmstore import LcmStore


def session_ids(store: LcmStore) -> list[str]:
    return [r[0] for r in store.conn.execute("SELECT id FROM sessions ORDER BY created_at")]


def has_session(store: LcmStore, session_id: str) -> bool:
    row = fetch_one(store.conn, "SELECT 1 FROM sessions WHERE id = ?", (session_id,))
    return row is not None


def bind_host_session(store: LcmStore, host_session_id: str, lcm_session_id: str) -> None:
    """Persist that the host's session id continues ``lcm_session_id``.

    Creates no session: an LCM session exists once a message is stored in
    it. (Hermes builds an agent, and binds a fresh id, for every API
    request and every background review fork; creating a session there
    left most sessions empty.) A host id that is its own LCM session is
    the default and needs no row.
    """
    validate_session_id(host_session_id)
    validate_session_id(lcm_session_id)
    if host_session_id == lcm_session_id:
        if host_session(store, host_session_id) is not None:
            with store.writing() as conn:
                conn.execute(
                    "DELETE FROM host_sessions WHERE host_session_id = ?", (host_session_id,)
                )
        return
    with store.writing() as conn:
        conn.execute(
            "INSERT INTO host_sessions(host_session_id, lcm_session_id, bound_at) "
            "VALUES (?, ?, ?) ON CONFLICT(host_session_id) DO UPDATE SET "
            "lcm_session_id = excluded.lcm_session_id, bound_at = excluded.bound_at "
            "WHERE lcm_session_id <> excluded.lcm_session_id",
            (host_session_id, lcm_session_id, time.time()),
        )


def host_session(store: LcmStore, host_session_id: str) -> str | None:
    """The LCM session bound to a host session id, or None."""
    value = fetch_value(  # bindings are never queued: no flush
        store.db.connection(),
        "SELECT lcm_session_id FROM host_sessions WHERE host_session_id = ?",
        (host_session_id,),
    )
    return str(value) if value is not None else None


def host_state(store: LcmStore, session_id: str) -> dict[str, Any]:
    text = host_state_text(store, session_id)
    return json.loads(text) if text else {}


def host_state_text(store: LcmStore, session_id: str) -> str | None:
    """The host state as stored, or as a queued write will store it (JSON text), or None."""
    state = store.host_state_raw(session_id)
    return state if state is None or isinstance(state, str) else json.dumps(state)


def set_host_state(store: LcmStore, session_id: str, state: dict[str, Any]) -> None:
    """Save what the host holds; a session with no stored message has nothing to save."""
    store.ingest_many(session_id, [], host_state=state)
