"""A real Hermes 0.19.0 agent uses LCM: compaction triggers, tools are offered and answer.

Hermes runs in a subprocess (``hermes_driver.py``) against the deterministic
fake OpenAI server; the engine is found through the ``hermes_agent.plugins``
entry point and selected by ``context.engine: lcm`` in config.yaml.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from fakes.fixtures import FakeLLM

from hermes_runtime.lcm.compact.assembly import validation_errors
from hermes_runtime.lcm.search.navigate import expand
from hermes_runtime.lcm.store.lcmstore import LcmStore

DRIVER = Path(__file__).with_name("hermes_driver.py")
FACT_TURN = 2


def write_config(home: Path, base_url: str, threshold: float = 0.1, target: float = 0.08) -> None:
    home.mkdir(parents=True, exist_ok=True)
    (home / "config.yaml").write_text(
        f"""
model:
  provider: custom
  base_url: {base_url}
  default: fake-model
  api_key: x
  context_length: 200000
plugins:
  enabled: [lcm]
context:
  engine: lcm
lcm:
  threshold_percent: {threshold}
  target_percent: {target}
  embeddings: "off"
"""
    )


def turns() -> list[str]:
    prompts = ["hello, please remember what I tell you"]
    for i in range(1, 9):
        fact = f" The vault passphrase is heliotrope-{i * 7}." if i == FACT_TURN else ""
        prompts.append(f"Turn {i}.{fact} " + "Notes about the harbour and the weather. " * 140)
    # \\u0068 keeps the word out of the question itself, so grep must find turn 2
    prompts.append(
        'What was the passphrase? [[tool:lcm_grep {"query": "\\u0068eliotrope", "scope": "all"}]] '
        '[[tool:lcm_describe {"id": "sum_1"}]]'
    )
    return prompts


def run_hermes(home: Path, base_url: str, prompts: list[str]) -> dict[str, Any]:
    turns_file = home / "turns.json"
    turns_file.write_text(json.dumps(prompts))
    env = {**os.environ, "HERMES_HOME": str(home), "HERMES_ACCEPT_HOOKS": "1"}
    done = subprocess.run(
        [sys.executable, str(DRIVER), base_url, str(turns_file)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


@pytest.mark.slow
def test_real_hermes_compacts_and_answers_with_lcm_tools(tmp_path: Path, fake_llm: FakeLLM) -> None:
    home = tmp_path / "hermes"
    write_config(home, fake_llm.base_url)
    prompts = turns()
    result = run_hermes(home, fake_llm.base_url, prompts)

    assert result["engine"] == "lcm"
    assert result["compression_count"] >= 1
    offered = {t["function"]["name"] for t in fake_llm.requests()[0]["tools"]}
    assert {"lcm_grep", "lcm_search", "lcm_describe", "lcm_expand", "lcm_read_output"} <= offered
    assert validation_errors(result["messages"]) == []

    store = LcmStore(home / "lcm.db", home / "outputs")
    try:
        assert store.counts()["summaries"] >= 1
        stored_users = [
            r[0] for r in store.conn.execute("SELECT content FROM messages WHERE role = 'user'")
        ]
        for prompt in prompts:  # every turn stored exactly once
            assert stored_users.count(prompt) == 1

        tool_answers = [m for m in result["messages"] if m.get("role") == "tool"]
        grep_answer = json.loads(tool_answers[-2]["content"])
        assert "heliotrope" in grep_answer["results"][0]["snippet"].lower()
        first = next(hit for hit in grep_answer["results"] if hit["role"] == "user")
        assert "heliotrope" in first["snippet"].lower()
        assert first["covered_by"], "the fact was folded into a summary and still found"
        expanded = expand(store, first["id"])["message"]
        assert expanded["content"] == prompts[FACT_TURN]
        describe_answer = json.loads(tool_answers[-1]["content"])
        assert describe_answer["id"] == "sum_1" and describe_answer["kind"] == "summary"
        assert "heliotrope" in result["replies"][-1].lower()
    finally:
        store.close()


def test_plain_turns_are_stored_as_they_happen(tmp_path: Path, fake_llm: FakeLLM) -> None:
    """No compaction, no LCM tool, no session end: each turn is in lcm.db right after it."""
    home = tmp_path / "hermes"
    write_config(home, fake_llm.base_url, threshold=0.9, target=0.5)
    prompts = ["The ferry leaves from pier amaranth-41.", "And the return ferry from pier 9."]
    result = run_hermes(home, fake_llm.base_url, prompts)

    assert result["engine"] == "lcm" and result["compression_count"] == 0
    assert not any(m.get("role") == "tool" for m in result["messages"])
    first, second = result["stored_after_turn"]
    assert first == prompts[:1]
    assert second == prompts
