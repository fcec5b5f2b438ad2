"""Through the real Hermes API server, every LCM session holds messages.

The finding this guards: under chat load on the cluster, 133 of 163 LCM
sessions had no message. Every agent Hermes builds calls the engine's
``on_session_start``, including the background memory/skill review fork
(every ``nudge_interval`` turns), which gets a fresh session id and never
stores a turn; binding that id created an LCM session. A session must exist
only once a message is stored in it, and binding rotating Hermes ids (the
fork, compaction) must never mint one.
"""

from __future__ import annotations

import time
from typing import Any

from fakes.fixtures import FakeLLM
from lcm_testlib import gateway_config, rows_when, stored_rows

REVIEW_PROMPT = "Review the conversation above"
SESSIONS = (
    "SELECT s.id, (SELECT count(*) FROM messages m WHERE m.session_id = s.id) FROM sessions s"
)


def wait_for_reviews(fake_llm: FakeLLM, wanted: int) -> bool:
    """The forks run after each reply, in the background: wait until all have asked the model."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        asked = [str(r["messages"][-1].get("content", "")) for r in fake_llm.requests()]
        if sum(text.startswith(REVIEW_PROMPT) for text in asked) >= wanted:
            return True
        time.sleep(0.5)
    return False


def test_review_forks_and_rotations_leave_no_empty_lcm_session(
    make_gateway: Any, fake_llm: FakeLLM
) -> None:
    lcm = {"threshold_percent": 0.3, "target_percent": 0.2, "fresh_tail_messages": 2}
    config = gateway_config(
        fake_llm,
        lcm,
        context_length=65536,
        compression={"in_place": False},
        memory={"memory_enabled": True, "nudge_interval": 1},
    )
    gateway = make_gateway(config)
    gateway.start()
    for conversation in ("alpha", "beta"):
        session = conversation
        for index in range(3):
            text = f"{conversation} turn {index} " + "Notes about the harbour. " * 800
            session = gateway.chat(text, session).session_id or session
    assert wait_for_reviews(fake_llm, 6), "Hermes spawned no review fork: the test proves nothing"
    settled = rows_when(gateway.db_path, SESSIONS, lambda rows: sum(r[1] for r in rows) >= 12)
    sessions = dict(settled)
    assert sessions == {"alpha": 6, "beta": 6}, sessions
    bound = {r[0] for r in stored_rows(gateway.db_path, "SELECT lcm_session_id FROM host_sessions")}
    assert bound <= {"alpha", "beta"}, bound  # rotations point back; fork ids need no row
