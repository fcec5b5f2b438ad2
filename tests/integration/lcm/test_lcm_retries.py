"""A turn cut mid-flight by a gateway crash, then retried by the client, is stored once.

Real Hermes 0.19.0 (``hermes-runtime agent run``) against the fake LLM. The client keeps its
history on the server (``X-Hermes-Session-Id``). The fake model hangs, so the request is cut
after Hermes wrote the user message to state.db and before any reply; the gateway is killed
with SIGKILL (the supervisor restarts it in place) and the client sends the same turn again.
Hermes then merges the stored copy with the retry (docs/retries.md): without LCM's replay
dedupe, lcm.db held the turn twice.
"""

from __future__ import annotations

import threading
import time
import urllib.error
from typing import Any

from fakes.fixtures import FakeLLM
from lcm_testlib import gateway_config, lcm_copies, rows_when, state_rows, stored_rows
from support.wait import wait_until

SESSION = "lcm-retried-turn"
CUT = "please remember the heron [retried-turn]"


def test_a_cut_then_retried_turn_is_stored_once(make_gateway: Any, fake_llm: FakeLLM) -> None:
    gateway = make_gateway(gateway_config(fake_llm, {}))
    gateway.start()
    assert gateway.chat("hello heron", SESSION).text == "Echo: hello heron"

    fake_llm.set_mode("hang", hang_seconds=120)
    cut: list[BaseException] = []

    def send() -> None:
        try:
            gateway.chat(CUT, SESSION)
        except (urllib.error.URLError, ConnectionError, OSError) as exc:
            cut.append(exc)

    first = threading.Thread(target=send, daemon=True)
    first.start()
    wait_until(lambda: state_rows(gateway, CUT) == 1, 60, "the cut turn in state.db")
    gateway.kill_gateway()  # returns once the in-place restart answers /health
    first.join(30)
    assert cut, "the request was not cut by the kill"

    fake_llm.set_mode("normal")
    time.sleep(0.5)
    reply = gateway.chat(CUT, SESSION)  # the client's retry of the same turn
    assert "heron" in reply.text
    assert gateway.chat("and the next turn", SESSION).text == "Echo: and the next turn"

    rows_when(  # the turn hook's group commit stores the last turn shortly after its reply
        gateway.db_path,
        "SELECT content FROM messages WHERE role = 'user'",
        lambda rows: any("and the next turn" in str(r[0]) for r in rows),
    )
    assert lcm_copies(gateway, CUT) == 1, stored_rows(
        gateway.db_path, "SELECT seq, role, content FROM messages ORDER BY seq"
    )
    assert lcm_copies(gateway, "and the next turn") == 1
    assert lcm_copies(gateway, "hello heron") == 1
