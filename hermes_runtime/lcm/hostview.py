"""What a host handed LCM at its last sync, so the next sync reads only what it appended.

Hermes' turn hook hands the whole live transcript every turn (a few hundred
messages at a 32k window, thousands at 1M). Fingerprinting each of them and
scanning each for summary headers made a turn's sync O(transcript) in
Python, most of its cost. A host that only appended hands back the very same
message dicts, in the same order, with the same field values: that is
checked at C speed (object identity over whole lists), and then only the
appended messages are fingerprinted and scanned.

Identity, not equality, is what makes the check safe and cheap: Hermes
edits messages in place (``message["content"] = ...``), so the fields a
fingerprint reads are snapshotted by identity too, and an edited message
falls back to the full path. A message whose print can change without any
of those fields being replaced (tool calls, list contents: nested objects
edited in place) is fingerprinted again on every sync, as before.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass
from itertools import repeat
from operator import is_
from typing import Any

# The fields ``syncstate.fingerprint`` and ``assembly.summary_refs_in`` read.
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
