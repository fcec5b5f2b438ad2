"""The fault suite's load client and figures (tests/support/chat_load.py).

The e2e fault suite and bench/agent_faults.py print these figures; a wrong window or a retry
that changed the turn's text would make them, and the LCM exactly-once check, meaningless.
"""

from __future__ import annotations

import itertools
import json
import threading
from dataclasses import asdict

from fakes.fixtures import FakeLLM
from support.chat_load import (
    Attempt,
    ChatClient,
    HealthChange,
    fault_figures,
    parse_records,
)
from support.net import free_port
from support.wait import wait_until


def attempt(turn: int, started: float, status: int, connect: float, total: float) -> Attempt:
    return Attempt("A", turn, f"[A:{turn:05d}]", started, connect, total, status)


def test_figures_cover_only_the_window_and_measure_down_to_back() -> None:
    attempts = [
        attempt(1, 99.0, 0, 9.0, 9.0),  # before the window: ignored
        attempt(2, 100.5, 0, 3.5, 3.5),
        attempt(2, 104.1, 0, 0.01, 0.01),
        attempt(2, 104.3, 200, 0.01, 1.2),
        attempt(3, 105.6, 200, 0.02, 0.4),
    ]
    health = [
        HealthChange(98.0, False),
        HealthChange(98.5, True),
        HealthChange(101.0, False),
        HealthChange(102.0, True),
        HealthChange(103.0, False),
        HealthChange(104.25, True),
    ]
    lines = ["not a record", *(json.dumps(asdict(r)) for r in [*attempts, *health])]
    parsed_attempts, parsed_health = parse_records(lines)
    assert parsed_attempts == attempts and parsed_health == health

    figures = fault_figures(parsed_attempts, parsed_health, 100.0, 106.0)
    assert figures.outage_s == 3.25  # first failure 101.0 -> back after the last one, 104.25
    assert figures.failed_requests == 2 and figures.turns_hit == 1
    assert figures.longest_connect_s == 3.5
    assert figures.max_latency_s == 1.2 and figures.answered == 2
    assert fault_figures(parsed_attempts, parsed_health, 105.0, 106.0).outage_s == 0.0


def test_a_failed_turn_is_retried_with_the_same_text_until_answered(fake_llm: FakeLLM) -> None:
    records: list[Attempt] = []
    url = [f"http://127.0.0.1:{free_port()}"]  # nothing listens: refused
    client = ChatClient(url, "key", name="B", record=records.append)
    thread = threading.Thread(target=client.run, daemon=True)
    thread.start()
    wait_until(lambda: len(records) >= 3, 30, "three refused attempts")
    url[0] = fake_llm.root_url
    wait_until(lambda: client.ok >= 2, 60, "two answered turns")
    client.stop.set()
    thread.join(30)

    first_turn = [r for r in records if r.turn == 1]
    assert [r.ok for r in first_turn][-1] and not any(r.ok for r in first_turn[:-1])
    assert {r.marker for r in first_turn} == {"[B:00001]"}
    assert "ConnectionRefusedError" in first_turn[0].error
    sent = [json.dumps(r) for r in fake_llm.requests()]
    assert any("[B:00001]" in s and "conversation of client B" in s for s in sent)
    assert client.figures()["retried_turns"] == 1


def test_every_turn_has_its_own_idempotency_key_the_same_on_each_retry() -> None:
    client = ChatClient(["http://127.0.0.1:1"], "key", name="A")
    first, again, second = (client.request(turn)[1]["Idempotency-Key"] for turn in (1, 1, 2))
    assert first == again != second
    # Another run of the load (a restarted load pod, the next benchmark): other keys.
    other = ChatClient(["http://127.0.0.1:1"], "key", name="A")
    assert other.request(1)[1]["Idempotency-Key"] != first
    assert "stream" not in client.request(1)[0]  # non-streaming: the cache covers it


def test_a_paused_client_waits_its_think_time_after_each_answer(fake_llm: FakeLLM) -> None:
    records: list[Attempt] = []
    pause = 0.3
    client = ChatClient([fake_llm.root_url], "key", record=records.append, pause=pause)
    thread = threading.Thread(target=client.run, daemon=True)
    thread.start()
    wait_until(lambda: client.ok >= 3, 60, "three answered turns")
    client.stop.set()
    thread.join(30)

    answered = [r for r in records if r.ok][:3]
    assert [r.turn for r in answered] == [1, 2, 3]
    for before, after in itertools.pairwise(answered):
        # total_s is rounded to the millisecond
        assert after.started >= before.started + before.total_s + pause - 0.001, records
