"""Event-loop lag beside LCM's heavy work: does compaction or embedding ever freeze the loop?

The Hermes gateway serves its API on an asyncio loop and runs agents (and so
LCM) on threads; a C extension that kept the GIL through a long call would
freeze the loop (lossless-claw #1067: 1.5 s). This runs an asyncio loop that
sleeps 5 ms at a time and records how late each wake-up is, while threads
compact sessions, drain the embedding queue with a real embedder, and run
hybrid searches. Goal: no wake-up later than 50 ms (on a quiet machine: the
figure also counts CPU contention from other processes).

Every lateness is tagged with the phase running beside it (compaction,
embedding, search), and the same loop is first measured beside an idle
neighbour for as long (``floor_*``): the lateness the machine alone causes.
On a loaded machine the floor itself exceeds 50 ms (other processes hold the
cores); the engine's share is the phase figures above the floor.

Run: ``.venv/bin/python bench/lcm_loop_lag.py [--messages 20000] [--embedder static|e5]``
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import runinfo

from hermes_runtime.lcm.compact.policy import CompactionPolicy
from hermes_runtime.lcm.config import LcmConfig
from hermes_runtime.lcm.embed.embedbatch import embed_batch
from hermes_runtime.lcm.embed.embedders import offline_embedder
from hermes_runtime.lcm.engine.lcmengine import LcmEngine
from hermes_runtime.lcm.search.hybrid import hybrid_search

TICK = 0.005
FLOOR_SECONDS = 30.0  # the idle-neighbour run lasts as long as the work, up to this


def history(count: int, rng: random.Random) -> list[dict[str, Any]]:
    words = ["harbour", "ferry", "pier", "weather", "tide", "cargo", "crane", "dock", "sail"]
    return [
        {"role": ("user", "assistant")[i % 2], "content": " ".join(rng.choices(words, k=60))}
        for i in range(count)
    ]


def heavy_work(
    engine: LcmEngine, sessions: int, done: threading.Event, phase: list[str]
) -> dict[str, float]:
    """Compact every session, embed the whole queue, then search: the loop's neighbours."""
    started = time.perf_counter()
    phase[0] = "compaction"
    for index in range(sessions):
        engine.compactions.compact(f"s{index}", 2_000)
    compacted = time.perf_counter()
    phase[0] = "embedding"
    assert engine.embedder is not None
    while embed_batch(engine.store, engine.embedder, 64).taken:
        pass
    embedded = time.perf_counter()
    phase[0] = "search"
    for query in ("ferry tide", "crane cargo", "dock weather") * 5:
        hybrid_search(engine.store, engine.embedder, query, None, 10, index=engine.vectors)
    done.set()
    return {
        "compaction_s": round(compacted - started, 2),
        "embedding_s": round(embedded - compacted, 2),
        "search_s": round(time.perf_counter() - embedded, 2),
    }


async def measure_lag(done: threading.Event, phase: list[str]) -> list[tuple[str, float]]:
    """(phase running beside, lateness in seconds) of each wake-up until ``done``."""
    lags = []
    while not done.is_set():
        started = time.perf_counter()
        await asyncio.sleep(TICK)
        lags.append((phase[0], time.perf_counter() - started - TICK))
    return lags


def floor_lags(seconds: float) -> list[float]:
    """The loop's lateness beside an idle thread: what the machine alone costs."""
    done = threading.Event()
    idle = threading.Timer(seconds, done.set)
    idle.start()
    lags = asyncio.run(measure_lag(done, ["idle"]))
    idle.join()
    return [lag for _, lag in lags]


def summary(prefix: str, lags: list[float]) -> dict[str, float]:
    ordered = sorted(lags) or [0.0]
    return {
        f"{prefix}p50_ms": round(statistics.median(ordered) * 1000, 2),
        f"{prefix}p99_ms": round(ordered[int(len(ordered) * 0.99)] * 1000, 2),
        f"{prefix}max_ms": round(ordered[-1] * 1000, 2),
    }


def run(messages: int, embedder_name: str, workdir: Path) -> dict[str, Any]:
    rng = random.Random(3)
    policy = CompactionPolicy(fresh_tail_messages=8, leaf_chunk_tokens=2_000)
    base = LcmConfig.for_home(workdir, {"embeddings": embedder_name})
    engine = LcmEngine(
        LcmConfig(**{**base.__dict__, "policy": policy}), embedder=offline_embedder(embedder_name)
    )
    assert engine.embedder is not None
    started = time.perf_counter()
    engine.embedder.embed(["warm-up"])  # the plugin preloads the model at gateway start
    model_load_s = round(time.perf_counter() - started, 2)
    sessions = max(1, messages // 1_000)
    for index in range(sessions):
        engine.store.ingest_many(f"s{index}", history(min(1_000, messages), rng))
    done, phase = threading.Event(), ["compaction"]
    phases: dict[str, float] = {}
    worker = threading.Thread(
        target=lambda: phases.update(heavy_work(engine, sessions, done, phase))
    )
    started = time.perf_counter()
    worker.start()
    lags = asyncio.run(measure_lag(done, phase))
    worker.join()
    busy_s = time.perf_counter() - started
    engine.close()
    by_phase = {
        name: summary(f"{name}_lag_", [lag for tagged, lag in lags if tagged == name])
        for name in ("compaction", "embedding", "search")
    }
    return {
        "messages": sessions * min(1_000, messages),
        "embedder": embedder_name,
        "model_load_s": model_load_s,
        **phases,
        "ticks": len(lags),
        **summary("lag_", [lag for _, lag in lags]),
        **{key: value for figures in by_phase.values() for key, value in figures.items()},
        **summary("floor_lag_", floor_lags(min(busy_s, FLOOR_SECONDS))),
        "goal_max_ms": 50,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--messages", type=int, default=20_000)
    parser.add_argument("--embedder", choices=["static", "e5"], default="static")
    args = parser.parse_args()
    runinfo.announce()
    with tempfile.TemporaryDirectory() as tmp:
        figures = run(args.messages, args.embedder, Path(tmp))
    print(json.dumps(figures, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
