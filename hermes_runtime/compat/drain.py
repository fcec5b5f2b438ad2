"""Adapter: Hermes' external drain marker and runtime status file, used to quiesce a restart.

``agent/restart.py`` holds a gateway in Hermes' own external drain before it restarts it:
``{HERMES_HOME}/.drain_request.json`` (``gateway/drain_control.py``: no new turns, 503 +
Retry-After) written and removed through Hermes' ``write_drain_request`` /
``read_drain_request`` / ``clear_drain_request`` (keyword ``home``, ``principal``,
``suppress_notification``), and ``{HERMES_HOME}/gateway_state.json``
(``gateway/status.py``: ``gateway_state`` "draining", ``active_agents``) read to see the
drain engaged and the work finished. Both modules have that shape in 0.19.0 and in the
v0.23 source; the marker is Hermes' own writing, so its payload follows the installed
Hermes.

Degraded, not refused, on another version or shape: no marker is written and nothing is
waited for; the restart goes straight to SIGUSR1, on which Hermes drains the turns in
flight itself (``agent.restart_drain_timeout``) but new turns are not held back first.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

from hermes_runtime.compat.version import degrade, installed_version, verdict

DRAIN_MODULE = "gateway.drain_control"
STATUS_MODULE = "gateway.status"
INTERNAL = f"{DRAIN_MODULE} (drain marker) and {STATUS_MODULE} (runtime status file)"
DRAIN_MARKER = ".drain_request.json"  # _DRAIN_REQUEST_FILENAME
STATUS_FILE = "gateway_state.json"  # _RUNTIME_STATUS_FILE
KEYWORDS = {
    "write_drain_request": {"principal", "suppress_notification", "home"},
    "read_drain_request": {"home"},
    "clear_drain_request": {"home"},
}


def drain_problem(drain: ModuleType, status: ModuleType) -> str | None:
    """Why these modules are not the drain contract restart.py uses (None: they are)."""
    if getattr(drain, "_DRAIN_REQUEST_FILENAME", None) != DRAIN_MARKER:
        return f"{drain.__name__} does not name its marker {DRAIN_MARKER}"
    if getattr(status, "_RUNTIME_STATUS_FILE", None) != STATUS_FILE:
        return f"{status.__name__} does not name its status file {STATUS_FILE}"
    for name, keywords in KEYWORDS.items():
        function = getattr(drain, name, None)
        if not callable(function):
            return f"{drain.__name__} has no {name}()"
        taken = set(inspect.signature(function).parameters)
        if not keywords <= taken:
            return f"{drain.__name__}.{name}() takes {sorted(taken)}, not {sorted(keywords)}"
    return None


@dataclass(frozen=True)
class DrainControl:
    """Hermes' drain-marker functions, checked: write ours, leave anyone else's alone."""

    write: Callable[..., Any]
    read: Callable[..., Any]
    clear: Callable[..., Any]

    def begin(self, data_dir: Path, principal: str) -> bool:
        """Write the marker unless one is there (someone else's drain); True if written."""
        if self.read(home=Path(data_dir)) is not None:
            return False
        self.write(principal=principal, suppress_notification=True, home=Path(data_dir))
        return True

    def clear_own(self, data_dir: Path, principal: str) -> None:
        """Remove the marker if ``principal`` wrote it (a half-written one is left alone)."""
        body = self.read(home=Path(data_dir))
        if isinstance(body, dict) and body.get("principal") == principal:
            self.clear(home=Path(data_dir))


def drain_control(
    drain: ModuleType | None = None,
    status: ModuleType | None = None,
    version: str | None = None,
) -> DrainControl | None:
    """Hermes' drain functions when the installed Hermes has them as known; else None,
    logged as degraded. ``drain``/``status``/``version``: the installed ones by default."""
    drain = drain or importlib.import_module(DRAIN_MODULE)
    status = status or importlib.import_module(STATUS_MODULE)
    found = verdict(INTERNAL, version or installed_version(), drain_problem(drain, status))
    if not found.ok:
        degrade(
            found,
            "the restart does not hold new turns back first: it signals the gateway at once "
            "and Hermes drains the turns in flight on SIGUSR1",
        )
        return None
    return DrainControl(
        drain.write_drain_request, drain.read_drain_request, drain.clear_drain_request
    )
