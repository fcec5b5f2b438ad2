"""What the sync knows of a host's transcript: fingerprints, the host state, the last view.

Pure functions of messages and of the host state saved with a session (no
store, no lock), and the bounded memory of what each host handed over last.
The engine's sync (``LcmEngine._sync``) plans on them: which of the host's
messages are stored already (``known_overlap``), what the host holds
afterwards (``next_host_state``, ``handed_out``), and the prints it compares
(``fingerprint``, ``FingerprintMemo``).

Host views: Hermes' turn hook hands the whole live transcript every turn.
Fingerprinting each message and scanning each for summary headers would make
a turn's sync linear in the transcript, in Python. A host that only appended
hands back the very same message dicts, in the same order, with the same
field values: that is checked at C speed (object identity over whole
lists), and then only the appended messages are fingerprinted and scanned.
Identity, not equality, is what makes the check safe and cheap: Hermes edits
messages in place (``message["content"] = ...``), so the fields a
fingerprint reads are snapshotted by identity too, and an edited message
falls back to the full path. A message whose print can change without any
of those fields being replaced (tool calls, list contents: nested objects
edited in place) is fingerprinted again on every sync.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections import OrderedDict
from dataclasses import dataclass
from itertools import repeat
from operator import is_
from typing import Any

# Version of ``fingerprint`` recorded in a session's host state ("fp"): a state
# with another scheme holds prints we cannot compare, so it counts as empty.
FINGERPRINT_SCHEME = 2


def _digest(value: Any) -> str:
    data = json.dumps(value, sort_keys=True, ensure_ascii=False, default=str)
    return hashlib.blake2b(data.encode(), digest_size=12).hexdigest()


_json_str = json.encoder.encode_basestring  # json.dumps' own string encoder (ensure_ascii=False)


def _plain_digest(content: str | None, role: str | None, call_id: str | None) -> str:
    """``_digest`` of a plain message's canonical dict, byte for byte the same JSON
    (sorted keys, default separators), built directly: the hook prints every new
    message, and the generic encoder was most of a print's cost."""
    data = (
        '{"content": '
        + ("null" if content is None else _json_str(content.strip()))
        + ', "role": '
        + ("null" if role is None else _json_str(role))
        + ', "tool_call_id": '
        + ("null" if call_id is None else _json_str(call_id))
        + ', "tool_calls": null}'
    )
    return hashlib.blake2b(data.encode(), digest_size=12).hexdigest()


PlainKey = tuple[str | None, str | None, str | None]


def _plain_key(message: dict[str, Any]) -> PlainKey | None:
    """(content, role, call id) of a message without tool calls, else None.

    All ``fingerprint`` reads of such a message: an equal key is an equal fingerprint.
    """
    content, role = message.get("content"), message.get("role")
    call_id = message.get("tool_call_id")
    if (
        isinstance(content, str | None)
        and isinstance(role, str | None)
        and isinstance(call_id, str | None)
        and not isinstance(message.get("tool_calls"), list)
    ):
        return content, role, call_id
    return None


def fingerprint(message: dict[str, Any]) -> str:
    """What identifies a message across host round trips: role, content, calls, call id.

    Hosts hand the same message back in another shape: Hermes' API server
    reloads a session from ``state.db`` (``X-Hermes-Session-Id``) with extra
    keys (``timestamp``, ``finish_reason``, ``tool_name``...) and stripped
    text. Hashing the whole dict made every reloaded message look new and
    stored each turn again; only the fields the model sees count here.
    """
    plain = _plain_key(message)
    if plain is not None:  # the JSON below, written without the encoder's generic walk
        return _plain_digest(*plain)
    content = message.get("content")
    calls = message.get("tool_calls")
    canonical = {
        "role": message.get("role"),
        "content": content.strip() if isinstance(content, str) else content,
        "tool_calls": [_call_identity(c) for c in calls] if isinstance(calls, list) else None,
        "tool_call_id": message.get("tool_call_id"),
    }
    return _digest(canonical)


class FingerprintMemo:
    """Fingerprints of the plain messages a host keeps handing back, remembered.

    Hermes' turn hook passes the whole live transcript every turn, so without
    a memo each turn re-hashes every message it holds (JSON + blake2b, most of
    a turn's cost once the transcript is long). Only messages without tool
    calls are remembered, keyed on the values ``fingerprint`` reads: a str
    caches its own hash, so looking up the same content object again is
    cheap, and an equal key always means an equal fingerprint. Bounded, and
    local to one engine (no module state).
    """

    def __init__(self, capacity: int = 4096) -> None:
        self._capacity = capacity
        self._prints: dict[PlainKey, str] = {}
        self._guard = threading.Lock()

    def of(self, message: dict[str, Any]) -> str:
        key = _plain_key(message)
        if key is None:
            return fingerprint(message)
        with self._guard:
            found = self._prints.get(key)
        if found is not None:
            return found
        found = _plain_digest(*key)
        with self._guard:
            if len(self._prints) >= self._capacity:
                self._prints.pop(next(iter(self._prints)))
            self._prints[key] = found
        return found


def _call_identity(call: Any) -> Any:
    if not isinstance(call, dict):
        return call
    function = call.get("function")
    if not isinstance(function, dict):
        function = {}
    return [call.get("id"), function.get("name"), function.get("arguments")]


def aligned_prefix(known: list[str], prints: list[str]) -> int:
    """Length of the longest prefix of ``prints`` found as a contiguous run in ``known``.

    Those messages are already stored; the rest of ``prints`` is new. A
    prefix (not any run) because hosts only append after what they hold.
    The usual turn (the host appended to all it held) is settled by one list
    comparison: joining and searching every print cost a turn O(transcript)
    string work.
    """
    if prints[: len(known)] == known:  # no longer prefix fits in ``known``
        return len(known)
    haystack = "|" + "|".join(known) + "|"
    for k in range(min(len(known), len(prints)), 0, -1):
        if "|" + "|".join(prints[:k]) + "|" in haystack:
            return k
    return 0


def comparable(saved: dict[str, Any]) -> dict[str, Any]:
    """The saved host state if its prints are of the current scheme, else an empty one."""
    return saved if saved.get("fp") == FINGERPRINT_SCHEME else {}


def known_overlap(saved: dict[str, Any], block: list[int], prints: list[str]) -> int:
    """How many leading ``candidates`` (the host's messages after its last block) are stored.

    A host built on our latest context holds our latest block and the raw
    tail after it (``raw``). A host that holds an older block, or none after
    we compacted, replays what it held before that compaction (``stale``):
    Hermes hands its pre-compaction transcript to the turn hook, and its API
    server reloads a session from ``state.db``. Aligning a stale host with
    the tail made every replayed message look new and stored it again.
    """
    saved = comparable(saved)
    raw, stale = saved.get("raw", []), saved.get("stale", [])
    if "block" not in saved or block == saved["block"]:
        return aligned_prefix(raw, prints)
    return aligned_prefix(stale, prints) or aligned_prefix(raw, prints)


def next_host_state(
    saved: dict[str, Any], block: list[int], prints: list[str], overlap: int
) -> dict[str, Any]:
    """What the host holds after this sync, as seen from our latest context.

    ``behind`` marks a host that did not take our latest context (its
    transcript is the one in ``stale``): ``handed_out`` needs to know which
    of the two a host that drops the next context will still hold.
    """
    saved = comparable(saved)
    if "block" not in saved or block == saved["block"]:
        current = {k: v for k, v in saved.items() if k != "behind"}
        # Nothing of our tail leads the host's: Hermes merged its first message into the
        # block's (both user messages), yet reloads it apart from state.db: keep it known.
        lost = saved.get("raw", []) if "block" in saved and not overlap else []
        return {**current, "raw": lost + prints, "fp": FINGERPRINT_SCHEME}
    # A stale host: its new messages extend our latest context's raw tail.
    raw = saved.get("raw", []) + prints[overlap:]
    return {**saved, "raw": raw, "stale": prints, "behind": True}


def handed_out(saved: dict[str, Any], block: list[int], raw: list[str]) -> dict[str, Any]:
    """The host state once we hand the host a context: ``block`` and the ``raw`` tail after it.

    The host may drop that context: Hermes from v0.21 gives ``compress()`` a
    timeout and discards a late result, and its retry of the same transcript
    (on the same engine) then waits for the late call and may be late too.
    Such a host still holds what it held at its last sync, so ``stale`` keeps
    that transcript: our previous raw tail when the host had taken our
    previous context, else the stale transcript already recorded. Handing out
    the same block again (a retry finding the work done) changes nothing of
    what a stale host holds; the old code overwrote ``stale`` with our raw
    tail there, and the host's next turn stored its whole transcript again.
    """
    saved = comparable(saved)
    if "block" in saved and block == saved["block"]:
        return {**saved, "raw": raw, "fp": FINGERPRINT_SCHEME}
    stale = saved.get("stale", []) if saved.get("behind") else saved.get("raw", [])
    return {"raw": raw, "block": block, "stale": stale, "fp": FINGERPRINT_SCHEME}


@dataclass(frozen=True)
class SyncPlan:
    """What one sync works from: where the host's transcript holds what, and its prints.

    ``head``: leading system messages; ``start``: first candidate message; ``block``: the
    last summary block's ids; ``prints``: the candidates' fingerprints, ``volatile`` those
    that may change in place; ``viewable``: the transcript may be kept as a host view.
    """

    head: int
    start: int
    block: list[int]
    prints: list[str]
    volatile: list[int]
    viewable: bool


@dataclass
class SyncResult:
    ingested: int
    system_head: list[dict[str, Any]]


# The fields ``fingerprint`` and ``assembly.summary_refs_in`` read.
FIELDS = ("role", "content", "tool_call_id", "tool_calls")

Columns = tuple[list[Any], ...]


def columns(messages: list[dict[str, Any]]) -> Columns | None:
    """Each message's value of each field in ``FIELDS`` (None when a message is no dict)."""
    try:
        return tuple(list(map(dict.get, messages, repeat(field))) for field in FIELDS)
    except TypeError:  # dict.get refuses anything but a dict
        return None


def is_stable(message: dict[str, Any]) -> bool:
    """Whether the message's print changes only when one of its ``FIELDS`` is replaced."""
    return (
        message.get("tool_calls") is None
        and isinstance(message.get("content"), str | None)
        and isinstance(message.get("role"), str | None)
        and isinstance(message.get("tool_call_id"), str | None)
    )


@dataclass
class HostView:
    """One sync's input and result, enough to sync an appended transcript cheaply."""

    messages: list[dict[str, Any]]  # the host's list (the dicts themselves: identity counts)
    fields: Columns  # ``columns(messages)`` at that sync
    head: int  # leading system messages
    start: int  # index of the first message after the head and the last summary block
    block: list[int]  # that block's summary ids ([] without one)
    prints: list[str]  # fingerprints of messages[start:]
    volatile: list[int]  # indexes into ``prints`` to fingerprint again (``is_stable`` False)
    saved_raw: Any  # the session's host state after that sync, as the store gave it (text/dict)
    saved: dict[str, Any]  # the same, parsed

    def appended(self, messages: list[dict[str, Any]], fields: Columns) -> int | None:
        """How many leading ``messages`` are this view's, unchanged; None if not all of them.

        The host appended if it hands back every message of the view, the
        same objects in the same order, each field still the same object.
        """
        known = len(self.messages)
        if len(messages) < known or known <= self.head:
            return None
        if not all(map(is_, messages, self.messages)):  # map stops after ``known``
            return None
        for now, then in zip(fields, self.fields, strict=True):
            if not all(map(is_, now, then)):
                return None
        return known


class HostViews:
    """The latest view of each session a host synced recently (bounded; thread-safe).

    Bounded because a view holds the host's messages alive: a gateway that
    served many sessions keeps the most recent ones only; a session whose view
    was dropped syncs through the full path once.
    """

    def __init__(self, capacity: int = 64) -> None:
        self._capacity = capacity
        self._views: OrderedDict[str, HostView] = OrderedDict()
        self._guard = threading.Lock()

    def get(self, session_id: str) -> HostView | None:
        with self._guard:
            return self._views.get(session_id)

    def put(self, session_id: str, view: HostView) -> None:
        with self._guard:
            self._views[session_id] = view
            self._views.move_to_end(session_id)
            while len(self._views) > self._capacity:
                self._views.popitem(last=False)
