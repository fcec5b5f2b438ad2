"""The host states a store wrote last, remembered as the dicts they were encoded from.

Why: the turn hook plans each sync on the session's host state. Parsing the
JSON text back every turn cost as much as encoding it; a store remembers the
dict it encoded (for the sessions written most recently) and hands back that
very dict while the stored text is still the one it wrote.
"""

from __future__ import annotations

import json
from collections import OrderedDict
from typing import Any

from hermes_runtime.lcm.records import HostState

ENCODED_STATES = 64  # sessions whose last committed host state is remembered as a dict


class EncodedStates:
    """A bounded map: session -> (the dict of its host state, the JSON text written)."""

    def __init__(self, capacity: int = ENCODED_STATES) -> None:
        self._capacity = capacity
        self._encoded: OrderedDict[str, tuple[dict[str, Any], str]] = OrderedDict()

    def encode(self, session_id: str, state: HostState | None) -> str | None:
        """The JSON text to store; a dict's is remembered (``decoded``).

        Remembered before the commit: a text that never commits is never read back.
        """
        if not isinstance(state, dict):
            self._encoded.pop(session_id, None)
            return state
        text = json.dumps(state)
        self._encoded[session_id] = (state, text)
        self._encoded.move_to_end(session_id)
        while len(self._encoded) > self._capacity:
            self._encoded.popitem(last=False)
        return text

    def decoded(self, session_id: str, text: str) -> HostState:
        """The dict ``text`` was encoded from, if this store wrote it last; else ``text``."""
        encoded = self._encoded.get(session_id)
        if encoded is not None and encoded[1] == text:
            return encoded[0]  # the dict it was encoded from: no parse
        return text
