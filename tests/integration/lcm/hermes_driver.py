"""Drive a real Hermes AIAgent through a multi-turn conversation (run as a subprocess).

Why a subprocess: Hermes reads HERMES_HOME and keeps process-wide caches
(plugins, config); a fresh interpreter per run keeps tests independent.
Usage: ``python hermes_driver.py BASE_URL TURNS.json`` with HERMES_HOME set;
prints one JSON object: the final reply of each turn, the agent's session
id, the engine's name, and the final message list.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


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
    for prompt in turns:
        result = agent.run_conversation(prompt, conversation_history=history)
        history = result.get("messages") or history
        replies.append(result.get("final_response") or "")
    engine = agent.context_compressor
    print(
        json.dumps(
            {
                "engine": getattr(engine, "name", type(engine).__name__),
                "compression_count": getattr(engine, "compression_count", 0),
                "lcm_session": getattr(engine, "session_id", None),
                "replies": replies,
                "messages": history,
            },
            default=str,
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
