"""Through the real Hermes API server, every plain turn is in lcm.db as soon as it is answered.

The finding this guards: API sessions never end after a turn, so before the
``post_llm_call`` hook a plain chat reached ``lcm.db`` only at compaction or
through an LCM tool, and a pod dying in between lost those turns. The agent
runs exactly as in the pod (``hermes-runtime agent run``: seeding, then the
Hermes gateway with its API server) against the deterministic fake LLM.
"""

from __future__ import annotations

from typing import Any

from fakes.fixtures import FakeLLM
from lcm_testlib import gateway_config, rows_when

USER_ROWS = "SELECT content FROM messages WHERE role = 'user' ORDER BY id"


def test_api_server_turns_are_stored_before_any_compaction_or_session_end(
    make_gateway: Any, fake_llm: FakeLLM
) -> None:
    gateway = make_gateway(gateway_config(fake_llm, {}))
    gateway.start()
    first, second = "The ferry leaves from pier amaranth-41.", "The return ferry uses pier 9."
    assert gateway.chat(first).text
    assert [r[0] for r in rows_when(gateway.db_path, USER_ROWS, lambda r: len(r) >= 1)] == [first]
    assert gateway.chat(second).text
    assert [r[0] for r in rows_when(gateway.db_path, USER_ROWS, lambda r: len(r) >= 2)] == [
        first,
        second,
    ]
