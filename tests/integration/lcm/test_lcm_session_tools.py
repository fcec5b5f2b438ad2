"""The tools peers added since (recent activity, another session's context, the summary DAG).

Through the real Hermes 0.19.0 gateway and its API server: the model (the
fake LLM, told by ``[[tool:NAME {args}]]`` in the user message) calls each
tool, Hermes runs it through the LCM engine, and the model gets the answer.
"""

from __future__ import annotations

import json
from typing import Any

from fakes.fixtures import FakeLLM
from lcm_testlib import gateway_config, stored_rows

NEW_TOOLS = {"lcm_recent", "lcm_load_session", "lcm_dag"}


def offered_tools(fake_llm: FakeLLM) -> set[str]:
    return {
        tool["function"]["name"]
        for request in fake_llm.requests()
        for tool in request.get("tools") or []
    }


def test_recent_sessions_another_sessions_context_and_the_dag(
    make_gateway: Any, fake_llm: FakeLLM
) -> None:
    lcm = {"threshold_percent": 0.3, "target_percent": 0.2, "fresh_tail_messages": 2}
    gateway = make_gateway(gateway_config(fake_llm, lcm, context_length=65536))
    gateway.start()
    earlier = "earlier"
    for index in range(4):
        text = f"Turn {index} of the kiwi-planet plan. " + "Notes about the harbour. " * 900
        earlier = gateway.chat(text, earlier).session_id or earlier
    summary = stored_rows(gateway.db_path, "SELECT min(id) FROM summaries")[0][0]
    assert summary is not None, "no compaction: the DAG test would prove nothing"

    recent = gateway.chat('Catch me up. [[tool:lcm_recent {"limit": 5}]]', "now").text
    assert recent.startswith("Tool results: lcm_recent -> "), recent[:300]
    assert '"session_id": "earlier"' in recent and '"messages": ' in recent, recent[:500]

    args = json.dumps({"session_id": "earlier", "budget": 3000})
    loaded = gateway.chat(f"Load it. [[tool:lcm_load_session {args}]]", "now").text
    assert '"session": "earlier"' in loaded and '"omitted_items"' in loaded, loaded[:500]

    tree = gateway.chat(f'[[tool:lcm_dag {{"id": "sum_{summary}"}}]]', "now").text
    assert f'"id": "sum_{summary}"' in tree and '"seq_range"' in tree, tree[:500]
    assert offered_tools(fake_llm) >= NEW_TOOLS
