"""The failed-turn adapter (``compat/turn_outcome.py``): the installed Hermes 0.19.0's
``AIAgent.run_conversation`` has the shape it wraps; a class as another Hermes might present
it is wrapped once, hands failed results (only those) to the observer and returns every
result unchanged; a missing method is degraded with one log line."""

from __future__ import annotations

import json
import types
from typing import Any

import pytest

from hermes_runtime.compat import TESTED_VERSION, observe_failed_turns
from hermes_runtime.compat.turn_outcome import run_conversation_problem

FAILED = {"failed": True, "final_response": "API call failed", "messages": [{"role": "user"}]}


def agent_module() -> types.ModuleType:
    """A ``run_agent`` module whose agent's turn returns the result it was made with."""

    class AIAgent:
        session_id = "s-1"

        def __init__(self, result: dict[str, Any]) -> None:
            self.result = result

        def run_conversation(self, user_message: str, **_: Any) -> dict[str, Any]:
            return self.result

    module = types.ModuleType("run_agent")
    module.AIAgent = AIAgent  # type: ignore[attr-defined]
    return module


def test_the_installed_hermes_has_the_run_conversation_the_adapter_wraps() -> None:
    import run_agent  # Hermes 0.19.0's, only inspected: the test process stays unwrapped

    assert run_conversation_problem(run_agent) is None


def test_failed_turns_reach_the_observer_and_every_result_is_returned_unchanged() -> None:
    seen: list[tuple[str, dict[str, Any]]] = []
    module = agent_module()
    assert observe_failed_turns(lambda s, r: seen.append((s, r)), module, TESTED_VERSION)
    assert observe_failed_turns(lambda s, r: seen.append((s, r)), module, TESTED_VERSION)
    assert module.AIAgent(FAILED).run_conversation("hi") is FAILED
    answered = {"final_response": "Echo: hi", "messages": []}
    assert module.AIAgent(answered).run_conversation("hi") is answered
    assert seen == [("s-1", FAILED)]  # wrapped once, and only the failed turn reported


def test_an_observer_error_never_reaches_the_turn() -> None:
    def broken(session_id: str, result: dict[str, Any]) -> None:
        raise RuntimeError("database is locked")

    module = agent_module()
    assert observe_failed_turns(broken, module, TESTED_VERSION)
    assert module.AIAgent(FAILED).run_conversation("hi") is FAILED


def test_an_agent_without_run_conversation_is_degraded(
    capsys: pytest.CaptureFixture[str],
) -> None:
    module = types.ModuleType("run_agent")
    module.AIAgent = type("AIAgent", (), {})  # type: ignore[attr-defined]
    assert not observe_failed_turns(lambda s, r: None, module, TESTED_VERSION)
    events = [json.loads(line) for line in capsys.readouterr().err.splitlines()]
    assert [e["event"] for e in events] == ["hermes.compat.degraded"]
    assert "run_conversation" in events[0]["problem"]
    assert "not kept in LCM" in events[0]["fallback"]


def test_the_failure_texts_reach_the_observer_redacted_by_hermes() -> None:
    seen: list[dict[str, Any]] = []
    key = "sk-abcdefghijklmnopqrstuvwxyz012345"
    leaky = {**FAILED, "final_response": f"HTTP 401: bad key {key}", "error": f"key {key}"}
    module = agent_module()
    assert observe_failed_turns(lambda s, r: seen.append(r), module, TESTED_VERSION)
    assert module.AIAgent(leaky).run_conversation("hi") is leaky  # Hermes' own: unchanged
    assert key not in json.dumps(seen[0]) and "HTTP 401: bad key" in seen[0]["final_response"]
