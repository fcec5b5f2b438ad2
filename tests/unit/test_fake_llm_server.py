"""The fake LLM is a test dependency of several areas: prove it speaks the protocol."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any

import pytest
from fakes.fixtures import FakeLLM, post_json


def test_models_lists_context_length(fake_llm: FakeLLM) -> None:
    with urllib.request.urlopen(fake_llm.base_url + "/models", timeout=5) as response:
        body = json.load(response)
    assert body["data"][0]["id"] == "fake-model"
    assert body["data"][0]["context_length"] == 128_000


def test_echo_is_deterministic_and_reports_usage(fake_llm: FakeLLM) -> None:
    payload = {"model": "m", "messages": [{"role": "user", "content": "hello there"}]}
    first = json.loads(post_json(fake_llm.base_url + "/chat/completions", payload))
    second = json.loads(post_json(fake_llm.base_url + "/chat/completions", payload))
    assert first["choices"][0]["message"]["content"] == "Echo: hello there"
    assert second["choices"][0]["message"]["content"] == "Echo: hello there"
    assert first["usage"]["prompt_tokens"] > 0


def test_directive_produces_tool_call_then_result_reply(fake_llm: FakeLLM) -> None:
    tools = [{"type": "function", "function": {"name": "lookup", "parameters": {}}}]
    messages: list[dict[str, Any]] = [
        {"role": "user", "content": 'please [[tool:lookup {"q": "x"}]]'}
    ]
    body = json.loads(
        post_json(fake_llm.base_url + "/chat/completions", {"messages": messages, "tools": tools})
    )
    call = body["choices"][0]["message"]["tool_calls"][0]
    assert call["function"]["name"] == "lookup"
    assert json.loads(call["function"]["arguments"]) == {"q": "x"}
    messages += [
        body["choices"][0]["message"],
        {"role": "tool", "tool_call_id": call["id"], "content": "forty-two"},
    ]
    body = json.loads(
        post_json(fake_llm.base_url + "/chat/completions", {"messages": messages, "tools": tools})
    )
    assert body["choices"][0]["message"]["content"] == "Tool results: lookup -> forty-two"


def test_stream_reassembles_to_the_same_text(fake_llm: FakeLLM) -> None:
    payload = {
        "messages": [{"role": "user", "content": "a fairly long message to split in chunks"}],
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    raw = post_json(fake_llm.base_url + "/chat/completions", payload).decode()
    events = [line[6:] for line in raw.splitlines() if line.startswith("data: ")]
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])
    assert text == "Echo: a fairly long message to split in chunks"
    assert chunks[-1]["usage"]["prompt_tokens"] > 0


def test_summary_is_shorter_than_input(fake_llm: FakeLLM) -> None:
    long_text = " ".join(f"word{i}" for i in range(500))
    payload = {
        "messages": [
            {"role": "system", "content": "Summarize the conversation."},
            {"role": "user", "content": long_text},
        ],
        "max_tokens": 100,
    }
    body = json.loads(post_json(fake_llm.base_url + "/chat/completions", payload))
    text = body["choices"][0]["message"]["content"]
    assert text.startswith("SUMMARY: word0")
    assert len(text) <= 400


def test_fail_mode_returns_500_and_requests_are_recorded(fake_llm: FakeLLM) -> None:
    fake_llm.set_mode("fail")
    with pytest.raises(urllib.error.HTTPError) as info:
        post_json(fake_llm.base_url + "/chat/completions", {"messages": []})
    assert info.value.code == 500
    assert len(fake_llm.requests()) == 1
    fake_llm.reset()
    assert fake_llm.requests() == []


def test_embeddings_are_normalized_and_similar_for_shared_words(fake_llm: FakeLLM) -> None:
    payload = {"input": ["the red fox", "the red fox jumps", "quantum chromodynamics"]}
    body = json.loads(post_json(fake_llm.base_url + "/embeddings", payload))
    vectors = [d["embedding"] for d in body["data"]]
    assert len(vectors[0]) == 64

    def dot(a: list[float], b: list[float]) -> float:
        return sum(x * y for x, y in zip(a, b, strict=True))

    assert abs(dot(vectors[0], vectors[0]) - 1.0) < 1e-9
    assert dot(vectors[0], vectors[1]) > dot(vectors[0], vectors[2])


def chat_raw(fake_llm: FakeLLM, stream: bool = False) -> tuple[int, dict[str, str], bytes]:
    """Status, headers and body of one chat request, however the fake answers it."""
    body = {"messages": [{"role": "user", "content": "hi"}], "stream": stream}
    request = urllib.request.Request(
        fake_llm.base_url + "/chat/completions",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, dict(response.headers), response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, dict(exc.headers), exc.read()


def test_the_failure_modes_fail_as_a_provider_does(fake_llm: FakeLLM) -> None:
    fake_llm.set_mode("429")
    status, headers, _ = chat_raw(fake_llm)
    assert (status, headers["Retry-After"]) == (429, "1")
    fake_llm.set_mode("malformed")
    status, _, body = chat_raw(fake_llm)
    assert status == 200
    with pytest.raises(json.JSONDecodeError):
        json.loads(body)
    fake_llm.set_mode("refuse")  # the connection closes without a status line
    with pytest.raises((urllib.error.URLError, ConnectionError, OSError)):
        chat_raw(fake_llm)
    fake_llm.set_mode("cut")
    status, _, body = chat_raw(fake_llm, stream=True)
    assert status == 200 and b"[DONE]" not in body and b'finish_reason": "stop' not in body
    fake_llm.set_mode("normal")
    assert chat_raw(fake_llm)[0] == 200
