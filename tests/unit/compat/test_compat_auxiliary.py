"""The auxiliary-model adapter against the installed Hermes 0.19.0 (its real ``call_llm``, the
fake OpenAI-compatible server as the task's provider) and against fake module objects and
plugin contexts as another Hermes would present them."""

from __future__ import annotations

import json
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fakes.fixtures import FakeLLM

from hermes_runtime.common.errors import RuntimeFailure
from hermes_runtime.compat import auxiliary_call, register_task
from hermes_runtime.compat.auxiliary import call_problem, response_text


def events(capsys: pytest.CaptureFixture[str]) -> list[dict[str, Any]]:
    return [json.loads(line) for line in capsys.readouterr().err.splitlines()]


@pytest.fixture
def configured(
    tmp_path: Path, fake_llm: FakeLLM, monkeypatch: pytest.MonkeyPatch
) -> Iterator[FakeLLM]:
    """Hermes' home whose config.yaml sends the task ``lcm_expand_query`` to the fake server."""
    task = {"provider": "custom", "base_url": fake_llm.base_url, "api_key": "k", "model": "m"}
    (tmp_path / "config.yaml").write_text(json.dumps({"auxiliary": {"lcm_expand_query": task}}))
    monkeypatch.setenv("HERMES_HOME", str(tmp_path))
    yield fake_llm


def test_the_installed_call_llm_reaches_the_tasks_model(configured: FakeLLM) -> None:
    import agent.auxiliary_client as module

    assert call_problem(module) is None
    call = auxiliary_call("lcm_expand_query")
    assert call is not None
    reply = call([{"role": "user", "content": "rephrase the ferry question"}], 64)
    assert reply == "Echo: rephrase the ferry question"
    sent = configured.requests()[-1]
    assert sent["model"] == "m" and sent["temperature"] == 0


def test_a_failing_model_raises_to_the_caller(configured: FakeLLM) -> None:
    call = auxiliary_call("lcm_expand_query")
    assert call is not None
    configured.set_mode("fail")
    with pytest.raises(Exception, match=r"500|[Ee]rror"):
        call([{"role": "user", "content": "x"}], 16)


def test_another_shape_of_call_llm_is_degraded(capsys: pytest.CaptureFixture[str]) -> None:
    def call_llm(task: str, messages: list[Any]) -> None:  # no temperature, no max_tokens
        return None

    other = types.ModuleType("agent.auxiliary_client")
    other.call_llm = call_llm  # type: ignore[attr-defined]
    assert auxiliary_call("lcm_expand_query", other, "0.19.0") is None
    assert auxiliary_call("lcm_expand_query", types.ModuleType("agent.auxiliary_client")) is None
    logged = events(capsys)
    assert [e["event"] for e in logged] == ["hermes.compat.degraded"] * 2
    assert "takes no temperature, max_tokens" in logged[0]["problem"]
    assert "has no call_llm" in logged[1]["problem"]
    assert "'lcm_expand_query' is not offered" in logged[0]["fallback"]


def test_an_unknown_hermes_version_is_degraded(capsys: pytest.CaptureFixture[str]) -> None:
    import agent.auxiliary_client as module

    assert auxiliary_call("lcm_expand_query", module, "0.30.0") is None
    assert "tested: 0.19.0" in events(capsys)[0]["problem"]


def test_response_texts_are_read_or_named() -> None:
    def response(content: Any) -> Any:
        message = types.SimpleNamespace(content=content)
        return types.SimpleNamespace(choices=[types.SimpleNamespace(message=message)])

    assert response_text(response("a\nb")) == "a\nb"
    assert response_text(response([{"text": "a"}, {"text": "b"}])) == "ab"
    with pytest.raises(RuntimeFailure, match="answered no text"):
        response_text(response(None))
    with pytest.raises(RuntimeFailure, match="answered no message"):
        response_text(types.SimpleNamespace(choices=[]))


class PluginContext:
    """What a plugin context of another Hermes may lack or refuse."""

    def __init__(self, refuse: bool = False) -> None:
        self.refuse = refuse
        self.tasks: dict[str, dict[str, Any]] = {}

    def register_auxiliary_task(self, key: str, **fields: Any) -> None:
        if self.refuse:
            raise ValueError(f"{key!r} is reserved")
        self.tasks[key] = fields


def test_the_task_is_declared_where_hermes_can(capsys: pytest.CaptureFixture[str]) -> None:
    ctx = PluginContext()
    assert register_task(ctx, "lcm_expand_query", "LCM", "rewrites", {"timeout": 20})
    assert ctx.tasks["lcm_expand_query"]["defaults"] == {"timeout": 20}
    assert not register_task(PluginContext(refuse=True), "lcm_expand_query", "L", "r", {})
    assert not register_task(object(), "lcm_expand_query", "L", "r", {})
    logged = events(capsys)
    assert "'lcm_expand_query' is reserved" in logged[0]["problem"]
    assert "not listed in `hermes model`" in logged[1]["fallback"]


def test_the_installed_plugin_context_declares_the_task() -> None:
    from hermes_cli.plugins import PluginContext as HermesContext

    assert callable(getattr(HermesContext, "register_auxiliary_task", None))
