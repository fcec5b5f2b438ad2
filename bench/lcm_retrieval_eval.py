"""Retrieval quality of LCM: planted facts asked back in paraphrase, recall@5.

Thirty conversations hold one planted fact each among generic chatter (and
distractors on neighbouring topics); every question is a paraphrase that
shares few words with its fact. Search runs across all sessions, the way
cross-session recall works for the agent. Prints recall@5 for full-text,
vector and hybrid (reciprocal rank fusion) search.

Run: ``.venv/bin/python bench/lcm_retrieval_eval.py [--embedder static|fake-openai]``
"""

from __future__ import annotations

import argparse
import json
import random
import tempfile
from pathlib import Path
from typing import Any

from hermes_runtime.lcm import LcmConfig, LcmEngine, retrieval
from hermes_runtime.lcm.embeddings import Embedder, StaticModelEmbedder, embed_all

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
]


def build(engine: LcmEngine, seed: int = 7) -> list[tuple[str, str]]:
    """Ingest the evaluation set; returns (question, id of the fact message)."""
    rng = random.Random(seed)
    cases = []
    for index, (fact, question) in enumerate(FACTS):
        session = f"eval-{index:02d}"
        messages: list[dict[str, Any]] = []
        fact_at = rng.randrange(5, 35)
        for turn in range(40):
            text = fact if turn == fact_at else rng.choice(CHATTER + DISTRACTORS)
            messages.append({"role": "user", "content": text})
            messages.append({"role": "assistant", "content": rng.choice(CHATTER)})
        stored = engine.store.ingest_many(session, messages)
        engine.compact(session, 400)
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


def recall_at(
    engine: LcmEngine,
    embedder: Embedder | None,
    cases: list[tuple[str, str]],
    mode: str,
    k: int = 5,
) -> float:
    """Share of questions whose top-k holds the fact or a summary that expands to it."""
    hits = 0
    for question, wanted in cases:
        accepted = leads_to(engine, wanted)
        results = retrieval.hybrid_search(engine.store, embedder, question, None, k, mode=mode)
        hits += any(r.id in accepted for r in results)
    return hits / len(cases)


def evaluate(workdir: Path, embedder: Embedder) -> dict[str, float]:
    config = LcmConfig.for_home(workdir, {"embeddings": "off"})
    engine = LcmEngine(config, embedder=embedder)
    try:
        cases = build(engine)
        embed_all(engine.store, embedder)
        return {
            mode: round(recall_at(engine, embedder, cases, mode), 3)
            for mode in ("fts", "vector", "hybrid")
        }
    finally:
        engine.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--embedder", choices=["static"], default="static")
    parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        figures = evaluate(Path(tmp), StaticModelEmbedder())
    print(json.dumps({"embedder": "tokenlearn-static-model-0.1.1", "recall@5": figures}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
