"""A session continued through Hermes' API server, across compactions and a gateway restart.

Real Hermes 0.19.0 (``hermes-runtime agent run``) against the fake LLM; the
client sends only the new message with ``X-Hermes-Session-Id`` so the API
server reloads the history from ``state.db`` (what the e2e chat client does).
Guards three findings:
- every turn was stored again on each request (the reloaded history carries
  extra keys, and the turn hook after a compaction hands the transcript from
  before it), so each turn must be stored exactly once;
- after a compaction the newest user turn reached the model folded into a
  summary: it must arrive verbatim, or as its stub when it alone is over
  ``externalize_chars``;
- the Hermes -> LCM session binding lived in memory only: after a restart
  the conversation must continue in the same LCM session.
"""

from __future__ import annotations

from typing import Any

import pytest
from fakes.fixtures import FakeLLM
from lcm_testlib import gateway_config, rows_when, stored_rows

SESSION = "lcm-continuity"
EXTERNALIZE_CHARS = 30_000
SUMMARIZER_PROMPTS = ("You summarize", "Summarize this")


def big_turn(index: int) -> str:
    """About 5k tokens: a 64K window at a 0.3 threshold compacts every couple of turns."""
    return f"Turn {index}. marker-word-{index}" + " Notes about the harbour and the weather." * 500


def last_user_text_sent_to_model(fake_llm: FakeLLM) -> str:
    """The final user message of the last agent (not summarizer) request the model got."""
    agent_requests = [
        r
        for r in fake_llm.requests()
        if not str(r["messages"][0].get("content", "")).startswith(SUMMARIZER_PROMPTS)
    ]
    assert agent_requests, "the model got no agent request"
    users = [m for m in agent_requests[-1]["messages"] if m.get("role") == "user"]
    return str(users[-1]["content"])


def user_rows(db: Any, at_least: int) -> list[tuple[Any, ...]]:
    """The user rows, once ``at_least`` are committed (the turn hook's group commit)."""
    return rows_when(
        db,
        "SELECT session_id, seq, content FROM messages WHERE role = 'user' ORDER BY id",
        lambda rows: len(rows) >= at_least,
    )


@pytest.mark.parametrize("in_place", [True, False], ids=["in-place", "rotating"])
def test_session_continues_once_per_turn_verbatim_and_across_a_restart(
    make_gateway: Any, fake_llm: FakeLLM, in_place: bool
) -> None:
    """``in_place: false`` makes Hermes rotate its session id at each compaction.

    The client then continues with the id the server answered with, and after
    the restart only the persisted binding leads that id to the LCM session.
    """
    lcm = {
        "threshold_percent": 0.3,
        "target_percent": 0.2,
        "fresh_tail_messages": 2,
        "externalize_chars": EXTERNALIZE_CHARS,
    }
    config = gateway_config(fake_llm, lcm, context_length=65536, compression={"in_place": in_place})
    gateway = make_gateway(config)
    gateway.start()
    session, sent = SESSION, []
    for index in range(1, 5):
        fake_llm.reset()
        text = big_turn(index)
        reply = gateway.chat(text, session)
        sent.append(text)
        session = reply.session_id or session
        # Hermes may merge our summary block into the user message that follows it;
        # the newest turn must still end the last user message, byte for byte.
        assert last_user_text_sent_to_model(fake_llm).endswith(text), f"turn {index}"
        assert [r[2] for r in user_rows(gateway.db_path, len(sent))] == sent, f"turn {index}"
    assert stored_rows(gateway.db_path, "SELECT count(*) FROM summaries")[0][0] >= 1
    if not in_place:
        assert session != SESSION, "Hermes did not rotate its session id at compaction"
    before = stored_rows(gateway.db_path, "SELECT session_id, max(seq) FROM messages")[0]
    assert before[0] == SESSION

    gateway.stop()
    gateway.start()  # a pod restart: nothing of the old process survives but the data dir
    fake_llm.reset()
    text = big_turn(5)
    reply = gateway.chat(text, session)
    sent.append(text)
    assert last_user_text_sent_to_model(fake_llm).endswith(text)
    rows = user_rows(gateway.db_path, len(sent))
    assert [r[2] for r in rows] == sent
    assert {r[0] for r in rows} == {SESSION}  # one LCM session, before and after the restart
    assert rows[-1][1] > before[1]  # appended after what the first process stored
    bindings = dict(
        stored_rows(gateway.db_path, "SELECT host_session_id, lcm_session_id FROM host_sessions")
    )
    # an id that is its own LCM session needs no row; a rotated one points back
    assert bindings.get(session, session) == SESSION and set(bindings.values()) <= {SESSION}
    # The context continues: the summaries folded before the restart are still in it.
    live = stored_rows(
        gateway.db_path,
        "SELECT count(*) FROM context_items WHERE session_id = ? AND summary_id IS NOT NULL",
        (SESSION,),
    )
    assert live[0][0] >= 1

    # A newest message over externalize_chars reaches the model as its stub, by design.
    fake_llm.reset()
    huge = "Turn 6. marker-word-6" + " A long pasted report line about the harbour." * 800
    assert len(huge) > EXTERNALIZE_CHARS
    session = gateway.chat(huge, reply.session_id or session).session_id or session
    arrived = last_user_text_sent_to_model(fake_llm)
    assert "[LCM externalized user output out_" in arrived and huge not in arrived
    assert [r[2] for r in user_rows(gateway.db_path, len(sent) + 1)][:-1] == sent
