"""The tools an agent uses on its own memory, called by a real Hermes 0.19.0 agent.

Hermes runs in a subprocess (``hermes_driver.py``) against the fake LLM, which calls each
tool when the user message says ``[[tool:NAME {args}]]``: ``lcm_status``, ``lcm_doctor``,
``lcm_search``/``lcm_grep`` with ``since``/``until``, and ``lcm_expand_query``, whose
rewrites come from Hermes' auxiliary model of the task ``lcm_expand_query`` (the same fake
server, named in config.yaml). Without that section the tool is not offered.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from fakes.fixtures import FakeLLM
from test_lcm_hermes_run import run_hermes

FACT = "We decided to use postgres for the billing database."
QUESTION = "which storage engine did we pick for billing"


def write_config(home: Path, base_url: str, auxiliary: bool) -> None:
    config: dict[str, Any] = {
        "model": {
            "provider": "custom",
            "base_url": base_url,
            "default": "fake-model",
            "api_key": "x",
            "context_length": 200000,
        },
        "plugins": {"enabled": ["lcm"]},
        "context": {"engine": "lcm"},
        "lcm": {"embeddings": "off", "threshold_percent": 0.9},
    }
    if auxiliary:
        task = {"provider": "custom", "base_url": base_url, "api_key": "x", "model": "aux-model"}
        config["auxiliary"] = {"lcm_expand_query": task}
    home.mkdir(parents=True, exist_ok=True)
    (home / "config.yaml").write_text(json.dumps(config))


def tool_answers(result: dict[str, Any]) -> list[Any]:
    return [json.loads(m["content"]) for m in result["messages"] if m.get("role") == "tool"]


def offered(fake_llm: FakeLLM) -> set[str]:
    return {
        tool["function"]["name"]
        for request in fake_llm.requests()
        for tool in request.get("tools") or []
    }


def test_status_doctor_time_filters_and_expand_query_through_hermes(
    tmp_path: Path, fake_llm: FakeLLM
) -> None:
    home = tmp_path / "hermes"
    write_config(home, fake_llm.base_url, auxiliary=True)
    expand = json.dumps({"query": QUESTION, "count": 2, "limit": 5})
    prompts = [
        FACT,
        "How is your memory? [[tool:lcm_status {}]] [[tool:lcm_doctor {}]]",
        '[[tool:lcm_search {"query": "billing database", "since": "1d"}]] '
        '[[tool:lcm_grep {"query": "postgres", "until": "2000-01-01"}]] '
        '[[tool:lcm_search {"query": "billing", "since": "last week"}]]',
        f"[[tool:lcm_expand_query {expand}]]",
    ]
    result = run_hermes(home, fake_llm.base_url, prompts)
    assert result["engine"] == "lcm"
    assert {"lcm_status", "lcm_doctor", "lcm_expand_query"} <= offered(fake_llm)
    status, doctor, recent, old, bad, expanded = tool_answers(result)

    assert status["stored"]["messages"] >= 2 and status["stored"]["sessions"] == 1
    assert status["stored"]["database_bytes"] > 0
    assert status["embedded"]["enabled"] is False
    assert status["compacted"]["session"]["id"] == result["lcm_session"]
    assert doctor["ok"], doctor
    assert {c["name"] for c in doctor["checks"]} >= {"database_file", "fulltext_index"}

    assert FACT in [hit["snippet"] for hit in recent["results"]]
    assert old == {"results": []}
    assert bad["error"].startswith("lcm_search: since: expected an ISO 8601"), bad

    aux = [r for r in fake_llm.requests() if r.get("model") == "aux-model"]
    assert len(aux) == 1 and aux[0]["messages"][-1]["content"] == QUESTION
    assert not aux[0].get("tools")
    assert expanded["queries"] == [QUESTION, f"Echo: {QUESTION}"]  # the fake echoes
    assert FACT in [hit["snippet"] for hit in expanded["results"]]
    assert "rewrite_error" not in expanded


def test_expand_query_is_not_offered_without_an_auxiliary_model(
    tmp_path: Path, fake_llm: FakeLLM
) -> None:
    home = tmp_path / "hermes"
    write_config(home, fake_llm.base_url, auxiliary=False)
    result = run_hermes(home, fake_llm.base_url, ["[[tool:lcm_status {}]]"])
    tools = offered(fake_llm)
    assert "lcm_status" in tools and "lcm_doctor" in tools
    assert "lcm_expand_query" not in tools
    assert tool_answers(result)[0]["stored"]["messages"] >= 1
