"""Adapter: Hermes' context-engine ABC and the plugin context LCM registers through.

LCM's engine subclasses ``agent.context_engine.ContextEngine`` and is registered with
``ctx.register_context_engine`` plus two hooks (``post_llm_call``: store each turn;
``on_session_finalize``: commit the queued turns). Checked here, and refused when wrong
(an engine built on another contract would lose or duplicate turns, silently):

- the ABC's abstract methods are among those LCM implements, and ``compress`` takes
  ``messages, current_tokens, focus_topic, force, memory_context`` (0.19.0 through the
  v0.23 source);
- the plugin context has ``register_context_engine`` and ``register_hook``.

Degraded, not refused: a hook name the host does not list in ``hermes_cli.plugins``'
``VALID_HOOKS`` (the host never fires it: turns are then stored at compaction, tool calls
and session end only).
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Collection, Iterable
from types import ModuleType
from typing import Any

from hermes_runtime.compat.version import (
    Verdict,
    degrade,
    installed_version,
    refuse,
    verdict,
)

MODULE = "agent.context_engine"
INTERNAL = f"{MODULE}.ContextEngine"
# What LcmContextEngine implements; an abstract method outside it would make it uninstantiable.
IMPLEMENTED = frozenset({"name", "update_from_response", "should_compress", "compress"})
COMPRESS_PARAMETERS = ("messages", "current_tokens", "focus_topic", "force", "memory_context")
REGISTRATION = ("register_context_engine", "register_hook")
HOOKS_MODULE = "hermes_cli.plugins"


def base_problem(module: ModuleType) -> str | None:
    """Why ``module``'s ``ContextEngine`` is not the ABC LCM implements (None: it is)."""
    base = getattr(module, "ContextEngine", None)
    if not inspect.isclass(base):
        return f"{module.__name__} has no ContextEngine class"
    extra = sorted(set(getattr(base, "__abstractmethods__", ())) - IMPLEMENTED)
    if extra:
        return f"abstract methods LCM does not implement: {', '.join(extra)}"
    compress = getattr(base, "compress", None)
    if compress is None:
        return "ContextEngine has no compress()"
    parameters = tuple(inspect.signature(compress).parameters)[1:]  # without self
    if parameters[: len(COMPRESS_PARAMETERS)] != COMPRESS_PARAMETERS:
        return f"compress{parameters} is not compress{COMPRESS_PARAMETERS}"
    return None


def engine_base(module: ModuleType | None = None, version: str | None = None) -> type[Any]:
    """The ``ContextEngine`` class to subclass, checked; ``HermesIncompatible`` otherwise.

    ``module``/``version``: the installed Hermes' by default (a test passes others).
    """
    hermes = module or importlib.import_module(MODULE)  # imported only when asked for
    found = verdict(INTERNAL, version or installed_version(), base_problem(hermes))
    if not found.ok:
        refuse(found)
    base: type[Any] = hermes.ContextEngine
    return base


def check_registration(ctx: Any, version: str | None = None) -> Verdict:
    """Refuse a plugin context without the registration calls LCM makes."""
    missing = [name for name in REGISTRATION if not callable(getattr(ctx, name, None))]
    problem = f"the plugin context has no {', '.join(missing)}" if missing else None
    found = verdict("hermes_cli.plugins.PluginContext", version or installed_version(), problem)
    if not found.ok:
        refuse(found)
    return found


def check_hooks(
    names: Iterable[str], module: ModuleType | None = None, version: str | None = None
) -> list[str]:
    """The hook names the host does not know; each is logged as degraded (none: [])."""
    plugins = module or importlib.import_module(HOOKS_MODULE)  # loaded by the host already
    valid = getattr(plugins, "VALID_HOOKS", None)
    known: Collection[str] = valid if isinstance(valid, Collection) else ()
    unknown = [n for n in names if n not in known]
    for name in unknown:
        found = verdict(
            f"{HOOKS_MODULE}.VALID_HOOKS[{name!r}]",
            version or installed_version(),
            "the host does not list this hook, so it never fires it",
        )
        degrade(found, "LCM stores turns when it compacts, runs a tool or ends a session")
    return unknown
