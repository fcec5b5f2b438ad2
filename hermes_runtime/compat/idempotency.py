"""Adapter: the Idempotency-Key cache of Hermes' API server, which ``agent/idempotency.py``
replaces with a durable one.

Hermes' handlers of non-streaming ``POST /v1/chat/completions`` and ``/v1/responses`` read
the module global ``gateway.platforms.api_server._idem_cache`` at call time and call its
``async get_or_set(key, fingerprint, compute_coro)`` (0.19.0, and the same in the v0.23
source). Replacing that one object is the whole integration, so this is what is checked:
the version, the global, its async method and the method's parameter names.

Degraded, not refused, on anything else: the durable cache is not installed and Hermes
keeps its own in-memory one (a retry after a gateway restart then runs the turn again,
as it does without hermes-runtime). From v0.21 Hermes' own ``POST /v1/runs`` keeps its
``Idempotency-Key`` durably by itself; it never went through ``_idem_cache``.
"""

from __future__ import annotations

import inspect
from types import ModuleType

from hermes_runtime.compat.version import Verdict, installed_version, verdict

API_SERVER_MODULE = "gateway.platforms.api_server"
CACHE_GLOBAL = "_idem_cache"  # the module global Hermes' handlers read
INTERNAL = f"{API_SERVER_MODULE}.{CACHE_GLOBAL}"
GET_OR_SET_PARAMETERS = ("key", "fingerprint", "compute_coro")


def cache_problem(module: ModuleType) -> str | None:
    """Why ``module`` has no cache the durable one can replace (None: it has Hermes')."""
    cache = getattr(module, CACHE_GLOBAL, None)
    if cache is None:
        return f"{module.__name__} has no {CACHE_GLOBAL}"
    method = getattr(cache, "get_or_set", None)
    if method is None or not inspect.iscoroutinefunction(method):
        return f"{module.__name__}.{CACHE_GLOBAL}.get_or_set is not an async method"
    parameters = tuple(inspect.signature(method).parameters)
    if parameters != GET_OR_SET_PARAMETERS:
        return (
            f"{module.__name__}.{CACHE_GLOBAL}.get_or_set takes {parameters}, "
            f"not {GET_OR_SET_PARAMETERS}"
        )
    return None


def check_cache(module: ModuleType, version: str | None = None) -> Verdict:
    """The version and ``module``'s cache, checked (``version``: the installed one by default)."""
    return verdict(INTERNAL, version or installed_version(), cache_problem(module))
