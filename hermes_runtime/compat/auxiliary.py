"""Adapter: Hermes' auxiliary model, which LCM's ``lcm_expand_query`` asks for other wordings.

Hermes routes its side jobs (compression, titles, web extraction) through
``agent.auxiliary_client.call_llm(task=..., messages=..., temperature=..., max_tokens=...)``:
the task's ``auxiliary.<task>`` section of config.yaml picks the provider, model, endpoint,
key and timeout, with Hermes' fallbacks and retries. A plugin declares its own task with
``PluginContext.register_auxiliary_task`` (listed in ``hermes model``'s picker); the section
applies without it too. Hermes 0.19.0 has both.

Degraded, not refused, when ``call_llm`` is missing or takes other parameters: the tool that
needs it is not offered (the rest of LCM is unaffected). A missing ``register_auxiliary_task``
only keeps the task out of the picker. Each is logged once, when the plugin loads.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable
from types import ModuleType
from typing import Any

from hermes_runtime.common.errors import RuntimeFailure
from hermes_runtime.common.logs import log_event
from hermes_runtime.compat.version import degrade, installed_version, verdict

MODULE = "agent.auxiliary_client"
FUNCTION = "call_llm"
INTERNAL = f"{MODULE}.{FUNCTION}"
PARAMETERS = ("task", "messages", "temperature", "max_tokens")
REGISTER = "register_auxiliary_task"

# Chat messages in, the model's text out; the int: the most tokens it may answer.
AuxiliaryCall = Callable[[list[dict[str, str]], int], str]


def call_problem(module: ModuleType) -> str | None:
    """Why ``module`` has no ``call_llm`` LCM can use (None: it has Hermes 0.19.0's)."""
    function = getattr(module, FUNCTION, None)
    if function is None or not callable(function):
        return f"{module.__name__} has no {FUNCTION}"
    try:
        parameters = inspect.signature(function).parameters
    except (TypeError, ValueError):
        return f"{module.__name__}.{FUNCTION} has no readable signature"
    missing = [name for name in PARAMETERS if name not in parameters]
    if missing:
        return f"{module.__name__}.{FUNCTION} takes no {', '.join(missing)}"
    return None


def response_text(response: Any) -> str:
    """The text of an OpenAI-shaped chat response (``choices[0].message.content``).

    A list of content parts is joined; anything else is an error naming what came back.
    """
    try:
        content = response.choices[0].message.content
    except (AttributeError, IndexError, TypeError) as exc:
        raise RuntimeFailure(
            f"{INTERNAL}: the auxiliary model answered no message ({type(response).__name__})"
        ) from exc
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            str(part.get("text", "")) if isinstance(part, dict) else str(getattr(part, "text", ""))
            for part in content
        )
    raise RuntimeFailure(f"{INTERNAL}: the auxiliary model answered no text ({content!r:.80})")


def auxiliary_call(
    task: str, module: ModuleType | None = None, version: str | None = None
) -> AuxiliaryCall | None:
    """A function sending chat messages to Hermes' auxiliary model of ``task`` (its text back),
    or None, degraded and logged, when Hermes has no ``call_llm`` in the shape used.

    ``module``: Hermes' ``agent.auxiliary_client`` (imported when None).
    """
    fallback = f"the LCM tool of task {task!r} is not offered"
    if module is None:
        try:
            module = importlib.import_module(MODULE)
        except ImportError as exc:
            degrade(verdict(INTERNAL, version or installed_version(), str(exc)), fallback)
            return None
    found = verdict(INTERNAL, version or installed_version(), call_problem(module))
    if not found.ok:
        degrade(found, fallback)
        return None
    call_llm = getattr(module, FUNCTION)

    def call(messages: list[dict[str, str]], max_tokens: int) -> str:
        response = call_llm(task=task, messages=messages, temperature=0, max_tokens=max_tokens)
        return response_text(response)

    return call


def register_task(
    ctx: Any, key: str, display_name: str, description: str, defaults: dict[str, Any]
) -> bool:
    """Declare an auxiliary task to Hermes (its picker, its defaults); False, logged, if not."""
    register = getattr(ctx, REGISTER, None)
    if register is None:
        log_event(
            "hermes.compat.degraded",
            level="warning",
            internal=f"PluginContext.{REGISTER}",
            hermes_version=installed_version(),
            fallback=f"auxiliary.{key} is not listed in `hermes model`; config.yaml still applies",
        )
        return False
    try:
        register(key, display_name=display_name, description=description, defaults=defaults)
    except (ValueError, ImportError) as exc:  # Hermes refused the key, or its picker's module
        log_event("hermes.compat.degraded", level="warning", internal=REGISTER, problem=str(exc))
        return False
    return True
