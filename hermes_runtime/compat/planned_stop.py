"""Adapter: Hermes' planned-stop marker, written before the SIGTERM of a pod's termination.

Without it Hermes counts a SIGTERM as unexpected and exits 1 (so systemd would revive it),
and a normal shutdown is reported as a failure. Hermes' own
``gateway.status.write_planned_stop_marker(target_pid)`` writes it under ``HERMES_HOME``
(0.19.0 and the v0.23 source: one required positional argument, returns a bool).

Degraded, not refused, on another version or shape: no marker; the gateway still stops
(SIGTERM, then the runner's kill after its grace period), and may exit 1.
"""

from __future__ import annotations

import importlib
import inspect
import os
from pathlib import Path
from types import ModuleType

from hermes_runtime.compat.version import degrade, installed_version, verdict

MODULE = "gateway.status"
FUNCTION = "write_planned_stop_marker"
INTERNAL = f"{MODULE}.{FUNCTION}"


def marker_problem(module: ModuleType) -> str | None:
    """Why ``module`` has no planned-stop writer taking a PID (None: it has Hermes')."""
    function = getattr(module, FUNCTION, None)
    if not callable(function):
        return f"{module.__name__} has no {FUNCTION}()"
    parameters = list(inspect.signature(function).parameters.values())
    required = [p for p in parameters if p.default is inspect.Parameter.empty]
    positional = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    if not parameters or parameters[0].kind not in positional or len(required) > 1:
        return f"{module.__name__}.{FUNCTION}{inspect.signature(function)} does not take a PID"
    return None


def write_planned_stop(
    data_dir: Path, pid: int, module: ModuleType | None = None, version: str | None = None
) -> bool:
    """Tell gateway ``pid`` (data dir ``data_dir``) that its coming SIGTERM is planned.

    True if Hermes wrote the marker. Hermes locates the data dir through ``HERMES_HOME``,
    set for the call and restored after it.
    """
    status = module or importlib.import_module(MODULE)
    found = verdict(INTERNAL, version or installed_version(), marker_problem(status))
    if not found.ok:
        degrade(found, "no planned-stop marker: the gateway may exit 1 on this planned SIGTERM")
        return False
    previous = os.environ.get("HERMES_HOME")
    os.environ["HERMES_HOME"] = str(data_dir)
    try:
        return getattr(status, FUNCTION)(pid) is not False
    finally:
        if previous is None:
            del os.environ["HERMES_HOME"]
        else:
            os.environ["HERMES_HOME"] = previous
