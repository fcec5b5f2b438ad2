"""The fake LLM records the Authorization header it received (GET /_auth).

Why: the e2e Vault scenario proves the agent's model key came from Vault by
reading which key the fake LLM saw; this checks that record is exact.
"""

from __future__ import annotations

import json
import urllib.request

from fakes.fixtures import FakeLLM, post_json


def authorizations(server: FakeLLM) -> list[str | None]:
    with urllib.request.urlopen(server.root_url + "/_auth", timeout=10) as response:
        return list(json.load(response)["authorization"])


def test_records_each_requests_authorization_in_order(fake_llm: FakeLLM) -> None:
    chat = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    post_json(fake_llm.base_url + "/chat/completions", chat, {"Authorization": "Bearer key-one"})
    post_json(
        fake_llm.base_url + "/embeddings", {"input": "x"}, {"Authorization": "Bearer key-two"}
    )
    post_json(fake_llm.base_url + "/chat/completions", chat, {})
    assert authorizations(fake_llm) == ["Bearer key-one", "Bearer key-two", None]


def test_reset_clears_recorded_authorizations(fake_llm: FakeLLM) -> None:
    chat = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    post_json(fake_llm.base_url + "/chat/completions", chat, {"Authorization": "Bearer k"})
    fake_llm.reset()
    assert authorizations(fake_llm) == []
    assert fake_llm.requests() == []
