"""Drive a real Hermes AIAgent through a multi-turn conversation (run as a subprocess).

Why a subprocess: Hermes reads HERMES_HOME and keeps process-wide caches
(plugins, config); a fresh interpreter per run keeps tests independent.
Usage: ``python hermes_driver.py BASE_URL TURNS.json`` with HERMES_HOME set;
prints one JSON object: the final reply of each turn, the agent's session
id, the engine's name, the final message list, and the user messages
``lcm.db`` held right after each turn once the turn hook's queue is
committed (read by a separate connection while the agent is still alive:
what a crash at that moment would keep; the hook's group commit does the
same on its own within ``lcm.commit_interval_ms``).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path


def stored_user_messages(db_path: Path) -> list[str]:
    """User messages committed to the LCM database, seen from another connection."""
    if not db_path.exists():
        return []
    from hermes_runtime.common.sqlite import connect

    conn = connect(db_path, readonly=True)
    try:
        return [r[0] for r in conn.execute("SELECT content FROM messages WHERE role = 'user'")]
    finally:
        conn.close()


def main() -> int:
    base_url, turns_file = sys.argv[1], Path(sys.argv[2])
    turns = json.loads(turns_file.read_text())
    from run_agent import AIAgent

    agent = AIAgent(
        api_key="x",
        base_url=base_url,
        provider="custom",
        model="fake-model",
        quiet_mode=True,
        platform="cli",
        skip_memory=True,
    )
    agent.suppress_status_output = True
    history: list = []
    replies = []
    stored_after_turn = []
    db_path = Path(os.environ["HERMES_HOME"]) / "lcm.db"
    for prompt in turns:
        result = agent.run_conversation(prompt, conversation_history=history)
        history = result.get("messages") or history
        replies.append(result.get("final_response") or "")
        compressor = agent.context_compressor
        if getattr(compressor, "name", "") == "lcm":
            compressor.engine.flush()
        stored_after_turn.append(stored_user_messages(db_path))
    engine = agent.context_compressor
    print(
        json.dumps(
            {
                "engine": getattr(engine, "name", type(engine).__name__),
                "compression_count": getattr(engine, "compression_count", 0),
                "lcm_session": getattr(engine, "session_id", None),
                "replies": replies,
                "messages": history,
                "stored_after_turn": stored_after_turn,
            },
            default=str,
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
