"""Copies of one message fold into one result, so distinct matches reach the top.

The finding this guards: with a transcript repeated 20 times (imported again,
a tool output fetched over and over), ``lcm_grep`` filled its list with
identical copies of the most BM25-friendly message and the one holding the
answer never made the list: 2 of 12 planted facts were found at 80k
messages, against 12 of 12 at 4k. Here each fact has short distractors that
share its query words (and outrank it), the whole transcript is stored 20
times (80k messages), and every fact must still come back, through the
agent's tools and through the CLI.
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from hermes_runtime.cli import main
from hermes_runtime.lcm.config import LcmConfig
from hermes_runtime.lcm.engine.lcmengine import LcmEngine

COPIES = 20
TRANSCRIPT = 4_000  # messages per copy: 80k in all
SESSION = "repeated"

# (fact, its unique answer word, query, distractors sharing every query word)
FACTS: list[tuple[str, str, str, list[str]]] = [
    (
        "The wifi password at the cabin is bluefinch77, taped under the router by the door.",
        "bluefinch77",
        "wifi password cabin",
        ["Cabin wifi password?", "What was the cabin wifi password", "cabin wifi password again"],
    ),
    (
        "My sister Clara moved to Lisbon last spring and now works at the harbour office there.",
        "Lisbon",
        "sister Clara moved",
        ["Clara my sister moved?", "sister Clara moved again"],
    ),
    (
        "The staging database password rotates every 30 days through the vault job at midnight.",
        "midnight",
        "staging database rotates",
        [
            "staging database rotates?",
            "does the staging database rotates",
            "staging database rotates",
        ],
    ),
    (
        "Our dog Biscuit is allergic to chicken, so the vet put him on a salmon diet for good.",
        "salmon",
        "Biscuit allergic",
        [
            "Biscuit allergic?",
            "is Biscuit allergic",
            "Biscuit allergic to what",
            "Biscuit allergic x",
        ],
    ),
    (
        "The quarterly board meeting is on March 14th at 9am in the glass room on floor six.",
        "glass",
        "quarterly board meeting",
        ["quarterly board meeting?", "when is the quarterly board meeting"],
    ),
    (
        "I parked the car on level 4 of the Elm Street garage, near the stairwell with the mural.",
        "mural",
        "parked car garage",
        ["parked car garage?", "where parked car garage", "parked the car in a garage"],
    ),
    (
        "The invoice from Acme Corp is due on the 28th and goes to the finance inbox in Leeds.",
        "Leeds",
        "invoice Acme due",
        ["Acme invoice due?", "invoice Acme due when"],
    ),
    (
        "My passport expires in November 2027, so the renewal form must go out by the summer.",
        "renewal",
        "passport expires",
        [
            "passport expires?",
            "when my passport expires",
            "passport expires soon",
            "passport expires",
        ],
    ),
    (
        "We chose Postgres over MongoDB for the billing service because of its strict schemas.",
        "schemas",
        "Postgres billing service",
        ["Postgres billing service?", "billing service on Postgres"],
    ),
    (
        "The deploy failed because the disk on node-3 was full of rotated journald archives.",
        "journald",
        "deploy failed disk",
        ["deploy failed disk?", "why deploy failed disk", "deploy failed disk full"],
    ),
    (
        "The spare house key is under the blue flowerpot beside the rain barrel in the yard.",
        "barrel",
        "spare house key",
        ["spare house key?", "where is the spare house key", "spare house key lost"],
    ),
    (
        "The API rate limit is 600 requests per minute per token, burst capped at ninety.",
        "ninety",
        "API rate limit",
        ["API rate limit?", "what is the API rate limit", "API rate limit again", "API rate limit"],
    ),
]


def transcript() -> list[dict[str, Any]]:
    """One copy: the facts and distractors spread among filler chatter."""
    rng = random.Random(16)
    syllables = ["ka", "lo", "mi", "ne", "ru", "ta", "vo", "zi", "pe", "su", "fa", "go"]
    words = ["".join(rng.choices(syllables, k=3)) for _ in range(400)]
    planted = [text for fact, _, _, distractors in FACTS for text in (fact, *distractors)]
    filler = TRANSCRIPT - len(planted)
    texts = [f"note {i}: " + " ".join(rng.choices(words, k=12)) for i in range(filler)]
    for offset, text in enumerate(planted):
        texts.insert((offset * 97) % len(texts), text)
    roles = ("user", "assistant")
    return [{"role": roles[i % 2], "content": text} for i, text in enumerate(texts)]


@pytest.fixture(scope="module")
def repeated(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LcmEngine]:
    home = tmp_path_factory.mktemp("repeated")
    engine = LcmEngine(LcmConfig.for_home(home, {"embeddings": "off"}))
    messages = transcript()
    for _ in range(COPIES):
        engine.store.ingest_many(SESSION, messages)  # one transaction per copy
    assert engine.store.counts()["messages"] == COPIES * TRANSCRIPT
    yield engine
    engine.close()


def answer_found(results: list[dict[str, Any]], answer: str) -> bool:
    return any(answer in hit["snippet"] and hit["count"] == COPIES for hit in results)


@pytest.mark.parametrize("tool", ["lcm_grep", "lcm_search"])
def test_every_fact_is_found_through_the_tools(repeated: LcmEngine, tool: str) -> None:
    missed = []
    for _fact, answer, query, _ in FACTS:
        payload = json.loads(repeated.handle_tool(tool, {"query": query}, SESSION))
        results = payload["results"]
        if not answer_found(results, answer):
            missed.append((query, [h["snippet"][:40] for h in results]))
        assert len({h["snippet"] for h in results}) == len(results), "a copy was not folded"
        assert all(len(h["ids"]) == h["count"] for h in results)
    assert not missed, missed


@pytest.mark.parametrize("verb", ["grep", "search"])
def test_every_fact_is_found_through_the_cli(
    repeated: LcmEngine, verb: str, capsys: pytest.CaptureFixture[str]
) -> None:
    db: Path = repeated.config.db_path
    extra = ["--mode", "fts"] if verb == "search" else []
    missed = []
    for _fact, answer, query, _ in FACTS:
        code = main(["lcm", verb, "--db", str(db), "--json", "--limit", "10", *extra, query])
        out = capsys.readouterr()
        assert code == 0, out.err
        results = json.loads(out.out)["results"]
        if not answer_found(results, answer):
            missed.append(query)
    assert not missed, missed
