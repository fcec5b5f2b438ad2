"""A turn the model never answered is kept in LCM, marked failed, and its retry stored once.

Real Hermes 0.19.0 (``hermes-runtime agent run``) against the fake LLM, one gateway for the
module, one session per failure mode. The fake provider fails each way a real one does
(``tests/fakes/openai_server.py``): HTTP 500 and 429 through every retry, a connection
closed before any answer (a provider that is down), a body that is not JSON, an answer cut
mid-way, an answer slower than the provider timeout. Before ``compat/turn_outcome.py``,
Hermes answered the client and kept the user's message in ``state.db`` while LCM had no
trace the user said anything (no hook fires for such a turn).

What the client gets is Hermes' API contract (docs/lcm.md, "Failed turns"): HTTP 200 with
``finish_reason: "error"`` and ``hermes.failed: true`` (a stream's last chunk carries both).
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from fakes.fixtures import FakeLLM
from lcm_testlib import API_KEY, Gateway, gateway_config, rows_when, stored_rows

# mode of the fake provider -> whether the client asks for a stream
MODES = {
    "fail": False,  # HTTP 500 through every retry
    "429": True,  # rate limited through every retry
    "refuse": False,  # the connection closes before any answer: the provider is down
    "malformed": False,  # HTTP 200, the body is not JSON
    "cut": True,  # the answer stops mid-way
    "hang": True,  # slower than the provider timeout
}
TIMEOUT_SECONDS = 3  # Hermes' request timeout for the fake provider (``hang`` outlasts it)


@dataclass
class Answer:
    status: int
    finish_reason: str | None
    content: str
    hermes: dict[str, Any]  # the answer's ``hermes`` object ({} on a plain answer)


def chat(gateway: Gateway, text: str, session: str, stream: bool = False) -> Answer:
    """One request carrying only the new user message; the answer as a client reads it."""
    body = {"model": "hermes-agent", "messages": [{"role": "user", "content": text}]}
    body["stream"] = stream
    request = urllib.request.Request(
        f"http://127.0.0.1:{gateway.port}/v1/chat/completions",
        data=json.dumps(body).encode(),
        headers={
            "Authorization": f"Bearer {API_KEY}",
            "Content-Type": "application/json",
            "X-Hermes-Session-Id": session,
        },
    )
    try:
        with urllib.request.urlopen(request, timeout=300) as response:
            status, raw = response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return Answer(exc.code, None, exc.read().decode(), {})
    if stream:
        return streamed_answer(status, raw)
    payload = json.loads(raw)
    choice = payload["choices"][0]
    hermes = payload.get("hermes") or {}
    return Answer(status, choice["finish_reason"], choice["message"]["content"], hermes)


def streamed_answer(status: int, raw: str) -> Answer:
    """The answer an SSE client assembles: the text of every delta, the last chunk's verdict."""
    chunks = [
        json.loads(line[len("data: ") :])
        for line in raw.splitlines()
        if line.startswith("data: ") and line != "data: [DONE]"
    ]
    text = "".join(
        str(c["choices"][0]["delta"].get("content") or "") for c in chunks if c.get("choices")
    )
    last = [c for c in chunks if c.get("choices")][-1]
    return Answer(status, last["choices"][0]["finish_reason"], text, last.get("hermes") or {})


def user_rows(gateway: Gateway, session: str) -> list[tuple[str, dict[str, Any]]]:
    """The session's user messages in lcm.db: (content, extra keys)."""
    rows = stored_rows(
        gateway.db_path,
        "SELECT content, extra FROM messages WHERE session_id = ? AND role = 'user' ORDER BY seq",
        (session,),
    )
    return [(str(content), json.loads(extra) if extra else {}) for content, extra in rows]


def user_rows_when(gateway: Gateway, session: str, text: str) -> list[tuple[str, dict[str, Any]]]:
    """``user_rows`` once one holds ``text`` (the writer thread commits shortly after a turn)."""
    rows_when(
        gateway.db_path,
        "SELECT content FROM messages WHERE session_id = ? AND role = 'user'",
        lambda rows: any(text in str(r[0]) for r in rows),
        (session,),
    )
    return user_rows(gateway, session)


@pytest.fixture(scope="module")
def gateway(
    tmp_path_factory: pytest.TempPathFactory, fake_llm_container: FakeLLM
) -> Iterator[Gateway]:
    provider = {
        "request_timeout_seconds": TIMEOUT_SECONDS,
        "stale_timeout_seconds": TIMEOUT_SECONDS,
    }
    config = gateway_config(fake_llm_container, {}, providers={"custom": provider})
    running = Gateway(Path(tmp_path_factory.mktemp("failed-turns")), config)
    running.start()
    try:
        yield running
    finally:
        running.stop()


@pytest.mark.parametrize("mode", list(MODES))
def test_a_failed_turn_is_kept_marked_and_its_retry_stored_once(
    gateway: Gateway, fake_llm: FakeLLM, mode: str
) -> None:
    session, text = f"failed-turn-{mode}", f"please keep the kestrel note [{mode}]"
    stream = MODES[mode]
    assert chat(gateway, f"hello before {mode}", session).finish_reason == "stop"

    fake_llm.set_mode(mode, hang_seconds=TIMEOUT_SECONDS * 3)
    failed = chat(gateway, text, session, stream)
    fake_llm.set_mode("normal")
    # The client can tell: Hermes' API contract for a turn without an answer.
    assert (failed.status, failed.finish_reason) == (200, "error"), failed
    assert failed.hermes.get("failed") is True, failed

    rows = user_rows_when(gateway, session, text)
    kept = [extra for content, extra in rows if content == text]
    assert len(kept) == 1, rows  # the user's message is in LCM, once
    marker = kept[0].get("_lcm_failed")
    assert isinstance(marker, dict), rows  # marked failed, with why
    assert marker["error"] and "reason" in marker, marker  # reason: Hermes' class, if any
    if not stream:  # the text the client got in place of an answer
        assert marker["answer"] == failed.content, marker

    retried = chat(gateway, text, session)  # the provider is back: the client retries
    assert (retried.status, retried.finish_reason) == (200, "stop"), retried
    assert text in retried.content
    after = f"and the turn after {mode}"
    assert chat(gateway, after, session).finish_reason == "stop"
    rows = user_rows_when(gateway, session, after)
    assert sum(content.count(text) for content, _ in rows) == 1, rows  # the retry: not twice
    assert [content for content, _ in rows if after in content] == [after], rows


def summary_levels(gateway: Gateway) -> list[int]:
    rows = stored_rows(gateway.db_path, "SELECT level FROM summaries ORDER BY id")
    return [int(level) for (level,) in rows]


def test_a_compaction_while_the_provider_fails_waits_for_it(
    make_gateway: Any, fake_llm: FakeLLM
) -> None:
    """LCM summarizes with the agent's model. While it fails, a compaction used to fold the
    oldest turns into a deterministic head+tail extract (level 3) that nothing summarizes
    again; now it defers (no summary, every message kept) and runs once the model is back."""
    lcm = {"threshold_percent": 0.1, "target_percent": 0.08, "externalize_chars": 100_000}
    config = gateway_config(fake_llm, lcm, context_length=200_000)
    gateway = make_gateway(config)
    gateway.start()
    session = "compaction-while-down"
    notes = [f"Turn {i}: notes about the harbour and the tide. " * 450 for i in range(1, 5)]
    for note in notes:
        assert chat(gateway, note, session).finish_reason == "stop"
    before = summary_levels(gateway)

    fake_llm.set_mode("fail")  # this turn alone crosses the threshold: a compaction is due
    big = "Turn 5: the long report on the harbour. " * 1500
    failed = chat(gateway, big, session)
    fake_llm.set_mode("normal")
    assert failed.finish_reason == "error", failed
    rows = user_rows_when(gateway, session, big)
    for text in [*notes, big]:  # no message lost, none stored twice
        assert sum(content.strip() == text.strip() for content, _ in rows) == 1, text[:40]
    assert summary_levels(gateway) == before  # no rote extract written while it failed

    assert chat(gateway, "and now the weather", session).finish_reason == "stop"
    written = summary_levels(gateway)[len(before) :]
    assert any(level in (1, 2) for level in written), written  # summarized once it is back
