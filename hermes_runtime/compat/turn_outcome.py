"""Adapter: the outcome of a Hermes turn, which no plugin hook reports when the turn fails.

Hermes 0.19.0 fires ``post_llm_call`` only for a turn that produced an answer. A turn whose
model calls all failed (the provider refused, timed out, answered 429 or 5xx through every
retry, or sent something unreadable) returns early from ``run_conversation`` with
``failed: True``, ``final_response`` (the text the client receives in place of an answer,
"API call failed after 3 retries: ..."), ``error`` (Hermes' summary), ``failure_reason``
(its classification) and ``messages`` (the transcript, with the user's message), and fires
no hook at all. LCM keeps that turn (docs/lcm.md, "Failed turns"), so this adapter wraps
``run_agent.AIAgent.run_conversation``: the original runs unchanged, its result is returned
unchanged, and a failed result is handed to the observer, whose errors are logged, never
raised into Hermes.

Degraded, not refused, when ``AIAgent.run_conversation`` is missing or is not a function:
failed turns are then not kept in LCM (Hermes' ``state.db`` still has the user's message).

The failure texts (``final_response``, ``error``) quote the provider's error, which may
carry a key or a signed URL, and LCM's database is backed up: the observer gets them
through Hermes' own redaction (``agent.redact.redact_sensitive_text``, forced, as the API
server applies it at its HTTP boundary). Without it (degraded), the texts are withheld.
"""

from __future__ import annotations

import functools
import inspect
import logging
import threading
from collections.abc import Callable
from types import ModuleType
from typing import Any

from hermes_runtime.compat.version import degrade, installed_version, verdict

MODULE = "run_agent"
INTERNAL = f"{MODULE}.AIAgent.run_conversation"
REDACT = "agent.redact.redact_sensitive_text"
WITHHELD = "(withheld: Hermes' redaction is unavailable)"
TEXT_KEYS = ("final_response", "error")
WRAPPED = "__hermes_runtime_turn_outcome__"  # set on our wrapper: never wrapped twice

# session id (Hermes'), the failed result
FailedTurnObserver = Callable[[str, dict[str, Any]], None]

_observer: list[FailedTurnObserver] = []  # the newest observer only (a plugin loads once)
_redactors: list[Callable[[str], str]] = []  # resolved once
_guard = threading.Lock()
logger = logging.getLogger(__name__)


def run_conversation_problem(module: ModuleType) -> str | None:
    """Why ``module`` has no ``AIAgent.run_conversation`` to wrap (None: it has)."""
    agent_class = getattr(module, "AIAgent", None)
    if not inspect.isclass(agent_class):
        return f"{module.__name__} has no AIAgent class"
    method = inspect.getattr_static(agent_class, "run_conversation", None)
    if not inspect.isfunction(method):
        return "AIAgent.run_conversation is not a function"
    if "user_message" not in inspect.signature(method).parameters:
        return "AIAgent.run_conversation takes no user_message"
    return None


def failed_result(result: Any) -> dict[str, Any] | None:
    """``result`` when it is a failed turn's (a dict with ``failed`` and a transcript)."""
    if not isinstance(result, dict) or not result.get("failed"):
        return None
    return result if isinstance(result.get("messages"), list) else None


def redactor() -> Callable[[str], str]:
    """Hermes' forced redaction of secrets in a text, or (degraded, logged once) a
    function that withholds any text."""
    with _guard:
        if _redactors:
            return _redactors[0]
    try:
        from agent.redact import redact_sensitive_text

        problem = (
            None
            if "force" in inspect.signature(redact_sensitive_text).parameters
            else ("redact_sensitive_text takes no force")
        )
    except ImportError as exc:
        problem = f"no {REDACT}: {exc}"
    found = verdict(REDACT, installed_version(), problem)
    if found.ok:
        chosen: Callable[[str], str] = functools.partial(redact_sensitive_text, force=True)
    else:
        degrade(found, "a failed turn's error texts are not kept in LCM")
        chosen = lambda text: WITHHELD if text else text  # noqa: E731
    with _guard:
        _redactors[:] = [chosen]
    return chosen


def redacted(result: dict[str, Any]) -> dict[str, Any]:
    """``result`` with its failure texts redacted (a copy: Hermes' own is left as it is)."""
    redact = redactor()
    texts = {k: redact(v) for k in TEXT_KEYS if isinstance(v := result.get(k), str)}
    return {**result, **texts}


def _notify(agent: Any, result: Any) -> None:
    """Hand a failed result to the observers; logs, never raises into Hermes' turn."""
    session_id = str(getattr(agent, "session_id", "") or "")
    try:
        found = failed_result(result)
        if found is None:
            return
        failed = redacted(found)
        with _guard:
            observers = list(_observer)
        for observer in observers:
            observer(session_id, failed)
    except Exception as exc:  # the turn's result goes back to Hermes whatever happens
        logger.warning("LCM: recording a failed turn of session %s failed: %s", session_id, exc)


def observe_failed_turns(
    observer: FailedTurnObserver, module: ModuleType | None, version: str | None = None
) -> bool:
    """Hand every failed turn of ``module.AIAgent`` to ``observer``; False when degraded.

    ``module`` is Hermes' ``run_agent`` (None while it is not imported yet: nothing is done,
    call again once it is). The newest observer replaces an earlier one.
    """
    if module is None:
        return False
    found = verdict(INTERNAL, version or installed_version(), run_conversation_problem(module))
    if not found.ok:
        degrade(found, "a turn whose model calls all failed is not kept in LCM")
        return False
    with _guard:
        _observer[:] = [observer]
        agent_class = module.AIAgent
        original = inspect.getattr_static(agent_class, "run_conversation")
        if getattr(original, WRAPPED, False):
            return True

        @functools.wraps(original)
        def run_conversation(self: Any, *args: Any, **kwargs: Any) -> Any:
            result = original(self, *args, **kwargs)
            _notify(self, result)
            return result

        setattr(run_conversation, WRAPPED, True)
        agent_class.run_conversation = run_conversation
    return True
