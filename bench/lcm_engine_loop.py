"""LCM engine loop: messages a second when driven the way Hermes drives a context engine.

Run: ``.venv/bin/python bench/lcm_engine_loop.py --messages 4000,20000,80000``
Prints one JSON object per size (one line each). The loop is the host's: for
every turn the user's message and the assistant's reply join the live
transcript, Hermes' ``post_llm_call`` hook stores the turn
(``store_turn``), and when the transcript passes the compression threshold
the host calls ``compress()`` and continues from the fitted context it gets
back (``--no-turn-hook``: a host without the hook, where ``compress()``
stores everything new in one transaction). The hook queues each turn for
LCM's group commit with ``--commit-interval-ms 50`` (``lcm.commit_interval_ms``;
the default, 0, is a transaction a turn); the loop's last turns
are committed before the clock stops. The summarizer is the instant
one (no model endpoint: LCM's deterministic fallback), so the figure is
LCM's own cost, not a model's.
Every 20th turn carries a tool result of 6-20k characters, so large outputs
are externalized on the way.

"Flat" is the point: a loop that re-reads the history gets slower as it
grows, so the result also gives the ratio of the largest size's rate to the
smallest's (``flat_ratio``; the goal is >= 0.8 with >= 10k messages/s).
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import random
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import runinfo

from hermes_runtime.lcm.config import LcmConfig
from hermes_runtime.lcm.host.hermes_plugin import LcmContextEngine

CONTEXT_TOKENS = 32_000


def vocabulary(size: int, rng: random.Random) -> list[str]:
    letters = "abcdefghijklmnopqrstuvwxyz"
    return ["".join(rng.choice(letters) for _ in range(rng.randint(3, 9))) for _ in range(size)]


class Talk:
    """Deterministic chatter: Zipf-distributed words, 15-120 a message, like lcm_bench."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.words = vocabulary(20_000, self.rng)
        self.weights = list(
            itertools.accumulate(1.0 / (rank + 1) for rank in range(len(self.words)))
        )

    def text(self, low: int = 15, high: int = 120) -> str:
        count = self.rng.randint(low, high)
        return " ".join(self.rng.choices(self.words, cum_weights=self.weights, k=count))


def conversation(total: int, talk: Talk) -> list[str]:
    """``total`` message texts, user and assistant in turn; every 20th reply a tool output."""
    texts = []
    for index in range(total):
        turn = index // 2 + 1
        if index % 2 == 1 and turn % 20 == 0:
            texts.append("tool output: " + talk.text(1_000, 3_000))
        else:
            texts.append(talk.text())
    return texts


def drive(
    total: int,
    workdir: Path,
    embeddings: str,
    seed: int,
    turn_hook: bool = True,
    commit_interval_ms: int | None = None,
) -> dict[str, Any]:
    """Run ``total`` messages through a fresh engine; time the whole host loop."""
    section: dict[str, Any] = {"embeddings": embeddings}
    if commit_interval_ms is not None:
        section["commit_interval_ms"] = commit_interval_ms
    config = LcmConfig.for_home(workdir, section)
    engine = LcmContextEngine(config)
    engine.update_model(model="bench", context_length=CONTEXT_TOKENS)
    session = f"bench-{total}"
    engine.on_session_start(session)
    texts = conversation(total, Talk(seed))  # made before the clock starts
    transcript: list[dict[str, Any]] = [{"role": "system", "content": "You are a test agent."}]
    compressions = 0
    clock = time.perf_counter
    in_hook = in_compress = 0.0
    cpu_started, started = time.process_time(), clock()
    for user, reply in zip(texts[0::2], texts[1::2], strict=True):
        transcript.append({"role": "user", "content": user})
        transcript.append({"role": "assistant", "content": reply})
        if turn_hook:
            mark = clock()
            engine._shared.store_turn(session_id=session, conversation_history=transcript)
            in_hook += clock() - mark
        if engine.should_compress_preflight(transcript):
            mark = clock()
            transcript = engine.compress(transcript)
            in_compress += clock() - mark
            compressions += 1
    engine.engine.flush()  # the loop's last turns are stored before the clock stops
    elapsed, cpu = clock() - started, time.process_time() - cpu_started
    counts = engine.engine.store.counts()
    batches = engine.engine.store.group_commit
    engine.engine.close()
    return {
        "messages": total,
        "embeddings": embeddings,
        "turn_hook": turn_hook,
        "commit_interval_ms": config.commit_interval_ms,
        "seconds": round(elapsed, 2),
        "messages_per_s": round(total / elapsed),
        # Where the time went: the turn hook, compress(), and the host's own work
        # (building the transcript, the preflight token estimate Hermes makes too).
        "seconds_hook": round(in_hook, 3),
        "seconds_compress": round(in_compress, 3),
        "seconds_host": round(elapsed - in_hook - in_compress, 3),
        # CPU seconds of this process over the loop: on a loaded machine wall time also
        # counts the time other processes held the cores.
        "cpu_seconds": round(cpu, 2),
        "compressions": compressions,
        "stored_messages": counts["messages"],
        "summaries": counts.get("summaries", 0),
        "group_commits": batches.batches if batches is not None else None,
        "load_1m": round(os.getloadavg()[0], 2),  # the machine is shared: read figures beside it
    }


def int_list(text: str) -> list[int]:
    """An argparse ``type``: comma-separated integers (argparse names the flag on error)."""
    try:
        return [int(part) for part in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"not a comma-separated list of integers: {text!r}"
        ) from None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--messages",
        type=int_list,
        default="4000,20000,80000",
        help="comma-separated sizes, each run on a fresh database (default 4000,20000,80000)",
    )
    parser.add_argument(
        "--embeddings",
        choices=["off", "static"],
        default="off",
        help="LCM's background embedder during the loop (default off: the loop alone)",
    )
    parser.add_argument(
        "--no-turn-hook",
        action="store_true",
        help="store only at compress() (a host without Hermes' post_llm_call hook)",
    )
    parser.add_argument(
        "--commit-interval-ms",
        type=int,
        default=None,
        help="lcm.commit_interval_ms for the engine (default: LcmConfig's; 0: a commit a turn)",
    )
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    runinfo.announce()
    sizes = args.messages
    if any(size <= 0 or size % 2 for size in sizes):
        parser.error(f"--messages: each size must be a positive even number: {args.messages!r}")
    results = []
    for size in sizes:
        with tempfile.TemporaryDirectory(prefix="lcm-loop-") as workdir:
            result = drive(
                size,
                Path(workdir),
                args.embeddings,
                args.seed,
                not args.no_turn_hook,
                args.commit_interval_ms,
            )
        results.append(result)
        print(json.dumps(result), flush=True)
    if len(results) > 1:
        ratio = results[-1]["messages_per_s"] / results[0]["messages_per_s"]
        print(json.dumps({"flat_ratio": round(ratio, 2), "goal": ">= 0.8, >= 10000 msg/s"}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
