"""A full data volume under a real Hermes gateway (issue 30): no answered turn lost or doubled.

``hermes-runtime agent run`` (the entrypoint, its front door, Hermes 0.19.0's gateway with
LCM) with its data dir on a real size-limited tmpfs, against the fake LLM. A turn is in
flight (the model takes a few seconds) when a ballast fills the volume to its last byte:
Hermes answers it (HTTP 200) though neither its ``state.db`` nor ``lcm.db`` takes a byte.
While full, ``/ready`` is 503 and a new request gets a 503 saying the data volume is full
(at once: no hang, no 200). The ballast removed, the agent serves again without a restart,
and every answered turn is in ``lcm.db`` exactly once (the one in flight included: LCM held
it in memory), which passes integrity_check.

The e2e fault test (tests/e2e/test_alerts.py) does the same in a cluster with two clients.
"""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fakes.fixtures import FakeLLM, start_fake_llm
from lcm_testlib import API_KEY, Gateway, gateway_config, lcm_copies, rows_when, stored_rows
from support.fullvolume import fill, refuses_a_new_file, small_tmpfs

VOLUME_MIB = 96
RESERVE_MIB = 8
SESSION = "full-volume"
IN_FLIGHT_SECONDS = 4.0  # the model's delay on the turn that is answered while full


@pytest.fixture
def fake_llm() -> Iterator[FakeLLM]:
    """A fake LLM process of this test's own: its "hang" mode delays the turn in flight, and a
    server shared by the tier must not keep that mode."""
    server = start_fake_llm()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def gateway(
    tmp_path: Path, fake_llm: FakeLLM, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Gateway]:
    monkeypatch.setenv("HERMES_RUNTIME_DATA_MIN_FREE_MIB", str(RESERVE_MIB))
    made = Gateway(tmp_path / "gw", gateway_config(fake_llm, {}))
    with small_tmpfs(made.data, mib=VOLUME_MIB):
        try:
            yield made
        finally:
            made.stop()


def post_chat(gateway: Gateway, text: str, timeout: float = 60) -> tuple[int, str]:
    """One turn on the API port: ``(status, answer or error body)``; 0 when no HTTP answer."""
    body = {"model": "hermes-agent", "messages": [{"role": "user", "content": text}]}
    request = urllib.request.Request(
        f"http://127.0.0.1:{gateway.port}/v1/chat/completions",
        data=json.dumps(body).encode(),
        headers={
            "Authorization": f"Bearer {API_KEY}",
            "Content-Type": "application/json",
            "X-Hermes-Session-Id": SESSION,
        },
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, json.loads(response.read())["choices"][0]["message"]["content"]
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode(errors="replace")
    except OSError as exc:
        return 0, repr(exc)


def ready(gateway: Gateway) -> tuple[int, dict[str, Any]]:
    url = f"http://127.0.0.1:{gateway.metrics_port}/ready"
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def wait_for(predicate: Any, what: str, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out: {what}"
        time.sleep(0.1)


def marker(turn: int) -> str:
    return f"[F:{turn:03d}]"


def test_a_full_volume_refuses_new_turns_and_loses_no_answered_one(
    gateway: Gateway, fake_llm: FakeLLM
) -> None:
    gateway.start()
    answered: list[str] = []
    for turn in range(3):
        status, _ = post_chat(gateway, f"{marker(turn)} before the volume fills")
        assert status == 200
        answered.append(marker(turn))

    # A turn in flight: the model answers after IN_FLIGHT_SECONDS; the volume fills meanwhile.
    fake_llm.set_mode("hang", hang_seconds=IN_FLIGHT_SECONDS)
    in_flight: list[tuple[int, str]] = []
    client = threading.Thread(
        target=lambda: in_flight.append(post_chat(gateway, f"{marker(3)} in flight"))
    )
    client.start()
    wait_for(lambda: any(marker(3) in json.dumps(r) for r in fake_llm.requests()), "turn 3 asked")
    fake_llm.set_mode("normal")
    ballast = fill(gateway.data)
    assert refuses_a_new_file(gateway.data)

    status, body = ready(gateway)
    assert status == 503, body
    assert "is full" in body["checks"]["data"] and "bytes free" in body["checks"]["data"], body
    turn = 4  # the front door's figure is at most a second old: then every new turn gets 503
    while (answer := post_chat(gateway, f"{marker(turn)} while full", timeout=30))[0] == 200:
        answered.append(marker(turn))
        turn += 1
    assert answer[0] == 503, answer  # refused at once, neither a hang nor an answer
    assert "data volume" in json.loads(answer[1])["error"], answer

    client.join(120)
    assert in_flight and in_flight[0][0] == 200, in_flight  # answered while full
    answered.append(marker(3))

    ballast.unlink()  # space is back: the agent serves again, nothing restarted
    wait_for(lambda: ready(gateway)[0] == 200, "ready again")
    for later in range(turn + 1, turn + 3):
        status, _ = post_chat(gateway, f"{marker(later)} after the space is back")
        assert status == 200
        answered.append(marker(later))

    last = answered[-1]
    rows_when(
        gateway.db_path,
        "SELECT content FROM messages WHERE role = 'user'",
        lambda rows: any(last in str(r[0]) for r in rows),
    )
    copies = {m: lcm_copies(gateway, m) for m in answered}
    rows = stored_rows(gateway.db_path, "SELECT seq, role, content FROM messages ORDER BY seq")
    assert all(n == 1 for n in copies.values()), "\n".join(map(str, [copies, *rows]))
    assert stored_rows(gateway.db_path, "PRAGMA integrity_check") == [("ok",)]
