"""Adapter: how LCM tells Hermes' background memory/skill review fork from a real turn.

The fork shares the parent's session id and replays its transcript with a harness prompt;
Hermes keeps its turns out of the session, and so must LCM's turn hook. Hermes 0.19.0 marks
that thread, and only it, with a tool whitelist: ``hermes_cli.plugins._thread_tool_whitelist``
(a ``threading.local`` whose ``allowed`` is set on that thread). Newer sources move it
(another module, or a ``ContextVar``).

Degraded, not refused, when the marker is missing or not a ``threading.local``: the turn
hook then cannot tell the fork apart, and may store the review's harness turn in the
user's history (searchable noise; nothing is lost). Logged once per module object.
"""

from __future__ import annotations

import threading
import weakref
from types import ModuleType
from typing import Any

from hermes_runtime.compat.version import degrade, installed_version, verdict

MODULE = "hermes_cli.plugins"
MARKER = "_thread_tool_whitelist"
INTERNAL = f"{MODULE}.{MARKER}"

# module -> its marker, or None once degraded (weak: a module object that goes is forgotten)
_resolved: weakref.WeakKeyDictionary[ModuleType, Any] = weakref.WeakKeyDictionary()
_guard = threading.Lock()


def marker_problem(module: ModuleType) -> str | None:
    """Why ``module`` has no thread marker LCM can read (None: it has Hermes 0.19.0's)."""
    marker = getattr(module, MARKER, None)
    if marker is None:
        return f"{module.__name__} has no {MARKER}"
    if not isinstance(marker, threading.local):
        return f"{module.__name__}.{MARKER} is a {type(marker).__name__}, not a threading.local"
    return None


def review_marker(module: ModuleType, version: str | None = None) -> Any:
    """``module``'s thread marker, or None (degraded, logged the first time) when unusable.

    Cheap after the first call for a module object: the turn hook asks on every turn.
    """
    with _guard:
        if module in _resolved:
            return _resolved[module]
    found = verdict(INTERNAL, version or installed_version(), marker_problem(module))
    marker = getattr(module, MARKER) if found.ok else None
    if marker is None:
        degrade(
            found,
            "LCM cannot tell the background review's turns from the user's: it may store "
            "the review's harness turn in the session's history",
        )
    with _guard:
        _resolved[module] = marker
    return marker


def on_review_thread(module: ModuleType | None) -> bool:
    """True on the thread of the background review fork (False where it cannot be told)."""
    if module is None:  # the host's plugin module never loaded: no thread can carry the mark
        return False
    marker = review_marker(module)
    return marker is not None and getattr(marker, "allowed", None) is not None
