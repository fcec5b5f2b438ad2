"""An answered turn whose answer died with the gateway, retried with its Idempotency-Key, is
answered from the durable cache and stored once.

Real Hermes 0.19.0 (``hermes-runtime agent run``: the warm gateway, then the supervisor's
restart in place) against the fake LLM, history on the server (``X-Hermes-Session-Id``). The
gateway answers a turn (reply in ``state.db`` and LCM, answer in
``.hermes-runtime/idempotency.db``), is killed with SIGKILL, and the client sends the same
request again, as it would after losing the answer (docs/retries.md, "An answer lost with the
gateway"). With the same ``Idempotency-Key`` the restarted gateway answers from the database
without asking the model, and both databases hold the turn once. Without a key the retry is a
new turn to the server, stored twice: the limit clients must send the key to avoid.
"""

from __future__ import annotations

from typing import Any

from fakes.fixtures import FakeLLM
from lcm_testlib import Gateway, gateway_config, lcm_copies, rows_when, state_rows, stored_rows


def model_calls(fake_llm: FakeLLM, text: str) -> int:
    """Chat requests the model got whose newest message is the user turn ``text``."""
    return sum(
        1
        for request in fake_llm.requests()
        if request["messages"][-1].get("role") == "user"
        and text in str(request["messages"][-1].get("content"))
    )


def stored_answers(gateway: Gateway) -> int:
    rows = stored_rows(
        gateway.data / ".hermes-runtime" / "idempotency.db", "SELECT count(*) FROM answers"
    )
    return int(rows[0][0]) if rows else 0


def in_lcm(gateway: Gateway, text: str) -> None:
    """Wait until the turn hook's group commit stored ``text`` in LCM."""
    rows_when(
        gateway.db_path,
        "SELECT content FROM messages WHERE role = 'user'",
        lambda rows: any(text in str(r[0]) for r in rows),
    )


def answer_then_crash(gateway: Gateway, text: str, session: str, key: str) -> Any:
    """Start, one opening turn, then ``text`` answered and stored, then SIGKILL and restart."""
    gateway.start()
    assert gateway.chat(f"hello {session}", session).text == f"Echo: hello {session}"
    first = gateway.chat(text, session, idempotency_key=key)
    assert first.text == f"Echo: {text}"
    in_lcm(gateway, text)  # the answer is stored everywhere, then the gateway dies
    gateway.kill_gateway()
    return first


def test_a_retry_with_its_key_after_a_crash_gets_the_stored_answer(
    make_gateway: Any, fake_llm: FakeLLM
) -> None:
    session, text, key = "idem-keyed", "please remember the kestrel [keyed]", "turn-7f3a9c"
    gateway = make_gateway(gateway_config(fake_llm, {}))
    first = answer_then_crash(gateway, text, session, key)
    assert stored_answers(gateway) == 1
    asked = model_calls(fake_llm, text)
    assert asked >= 1

    again = gateway.chat(text, session, idempotency_key=key)  # the client's retry
    assert again == first
    assert model_calls(fake_llm, text) == asked, "the retry ran the agent again"

    assert gateway.chat("and the next turn", session).text == "Echo: and the next turn"
    in_lcm(gateway, "and the next turn")
    assert state_rows(gateway, text) == 1
    assert lcm_copies(gateway, text) == 1, stored_rows(
        gateway.db_path, "SELECT seq, role, content FROM messages ORDER BY seq"
    )
    assert lcm_copies(gateway, "and the next turn") == 1


def test_without_a_key_the_retry_after_a_crash_is_a_new_turn(
    make_gateway: Any, fake_llm: FakeLLM
) -> None:
    """The limit: without ``Idempotency-Key`` nothing tells the server the turn was answered."""
    session, text = "idem-unkeyed", "please remember the plover [unkeyed]"
    gateway = make_gateway(gateway_config(fake_llm, {}))
    first = answer_then_crash(gateway, text, session, key="")
    assert stored_answers(gateway) == 0
    asked = model_calls(fake_llm, text)

    again = gateway.chat(text, session)
    assert again.text == first.text  # the fake model echoes: the same text, a second run
    assert model_calls(fake_llm, text) > asked

    assert gateway.chat("and the next turn", session).text == "Echo: and the next turn"
    in_lcm(gateway, "and the next turn")
    assert state_rows(gateway, text) == 2
    assert lcm_copies(gateway, text) == 2
