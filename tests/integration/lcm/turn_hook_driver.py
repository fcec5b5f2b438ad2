"""Drive LCM's Hermes engine through its turn hook in a process of its own (for crash tests).

Usage: ``python turn_hook_driver.py HOME SESSION COMMIT_INTERVAL_MS END STEP...``.
Each STEP is a number N (hand the hook the host's transcript of turns
0..N-1, as Hermes' ``post_llm_call`` does after a turn) or ``flush`` (commit
the hook's queue now). Then one JSON line is printed; with END ``hang`` the
process waits on stdin (to be killed: what a SIGKILL keeps), with ``exit``
it returns from main without closing anything (a normal interpreter exit:
``atexit`` commits the queue; Hermes' gateway instead ends with ``os._exit``
after its shutdown calls ``on_session_finalize`` and ``on_session_end``).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from hermes_runtime.lcm.config import LcmConfig
from hermes_runtime.lcm.host.hermes_plugin import LcmContextEngine

SYSTEM = {"role": "system", "content": "You are Hermes."}


def transcript(turns: int) -> list[dict[str, Any]]:
    """The host's transcript after ``turns`` turns (the same text on every run)."""
    messages = [SYSTEM]
    for index in range(turns):
        messages += [
            {"role": "user", "content": f"turn {index}: where does ferry {index} leave from?"},
            {"role": "assistant", "content": f"Ferry {index} leaves from pier {index + 40}."},
        ]
    return messages


def main() -> int:
    home, session, interval, end, *steps = sys.argv[1:]
    config = LcmConfig.for_home(
        Path(home), {"embeddings": "off", "commit_interval_ms": int(interval)}
    )
    engine = LcmContextEngine(config)
    engine.update_model("fake-model", 32_000)
    engine.on_session_start(session)
    for step in steps:
        if step == "flush":
            engine.engine.flush()
        else:
            engine._shared.store_turn(
                session_id=session, conversation_history=transcript(int(step))
            )
    print(json.dumps({"steps": steps}), flush=True)
    if end == "hang":
        sys.stdin.read()  # until the test kills this process
    return 0


if __name__ == "__main__":
    sys.exit(main())
