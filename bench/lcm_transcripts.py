"""Agent-like transcripts with planted facts, for embedding speed and recall (deterministic).

What "transcript-like" means here: a user asks in a sentence or three, the
assistant calls tools (a short line, often no text at all) and gets their
output back (listings, logs, JSON, code: hundreds to thousands of
characters), then answers in a paragraph or several. Lengths follow that mix
(``describe`` prints them), not the 37-character chatter of the retrieval
evaluation. Twelve facts are planted in user messages, each told in passing
inside a longer message, with near-topic distractors elsewhere; every
question is a paraphrase sharing few words with its fact.

Used by bench/lcm_time_to_searchable.py and tests/integration/lcm.
"""

from __future__ import annotations

import json
import random
import statistics
from dataclasses import dataclass
from typing import Any

# (fact, paraphrased question, distractors on the same topic)
FACTS: list[tuple[str, str, list[str]]] = [
    (
        "the staging Postgres replica lives in the Oslo datacenter now",
        "Where is the copy of the test database hosted?",
        ["the production Postgres primary got a bigger disk", "Oslo had a power cut last year"],
    ),
    (
        "my daughter Mila starts violin lessons on Thursdays at five",
        "When does my kid have her music class?",
        ["Mila's school trip is next month", "the neighbour plays the piano at night"],
    ),
    (
        "we rotate the signing key for release artifacts every 90 days",
        "How often is the key that signs our builds replaced?",
        ["the release notes template changed", "artifacts are kept for a year"],
    ),
    (
        "I'm allergic to penicillin, so the clinic put that on my file",
        "Which antibiotic must doctors avoid giving me?",
        ["the clinic moved to a new building", "I had a flu shot in October"],
    ),
    (
        "the nightly backup job writes to the bucket named hermes-archive-eu",
        "Where do our overnight snapshots get stored?",
        ["the bucket policy was reviewed in March", "a backup of the wiki failed once"],
    ),
    (
        "Jonas is the only one with admin rights on the billing dashboard",
        "Who can change settings in the payments console?",
        ["Jonas reviewed the billing code last week", "the dashboard was slow on Monday"],
    ),
    (
        "our team's on-call rotation switches every Tuesday at noon",
        "When does the pager duty hand over to the next person?",
        ["the on-call laptop needs a new charger", "Tuesday's standup was cancelled"],
    ),
    (
        "the office alarm code changed to 4471 after the break-in",
        "What number disarms the security system at work?",
        ["the office plants need watering", "a new badge reader was installed"],
    ),
    (
        "we picked Rust for the log shipper because of its memory footprint",
        "Why did we choose that language for forwarding logs?",
        ["the log retention is 30 days", "Rust 1.80 came out recently"],
    ),
    (
        "my flight to Montreal leaves on the 14th from terminal 2",
        "When do I travel to Canada?",
        ["Montreal has great bagels", "terminal 2 has a new lounge"],
    ),
    (
        "the API gateway times out upstream calls after 45 seconds",
        "How long does the proxy wait before giving up on a backend?",
        ["the API gateway logs are in JSON", "upstream services moved to gRPC"],
    ),
    (
        "Grandpa Luis turns 85 in June and wants a small dinner",
        "When is my grandfather's birthday?",
        ["Luis from accounting is on holiday", "the dinner plates broke in the move"],
    ),
]

FILES = [
    "api/server.py",
    "charts/values.yaml",
    "ci/run",
    "docs/backup.md",
    "lcm/store.py",
    "Makefile",
    "tests/test_sync.py",
    "deploy/kustomization.yaml",
    "README.md",
]
SERVICES = ["gateway", "billing", "scheduler", "indexer", "auth", "uploader", "metrics"]
ERRORS = [
    "connection refused",
    "timeout after 30s",
    "permission denied",
    "disk full",
    "certificate expired",
    "out of memory",
    "no such file or directory",
]
ASKS = [
    "Can you check why the {svc} service keeps restarting?",
    "Please look at {file} and tell me what changed since last week.",
    "The build failed again with {err}. Any idea?",
    "What does the {svc} config do with retries?",
    "Could you summarize the open issues about {svc}?",
    "I want to refactor {file}; where should I start?",
    "Run the tests for {svc} and tell me what breaks.",
    "How big is the database of {svc} now?",
    "Draft a short note to the team about the {svc} outage.",
    "Why is {file} so slow to load?",
]
OPENERS = ["Morning!", "Quick one.", "Thanks for earlier.", "Back again.", "Hi,", "OK so", ""]
SAYS = [
    "I looked at {file} and the {svc} settings; the retry budget is three attempts with "
    "exponential backoff starting at 200 ms.",
    "The failure comes from {err} while the {svc} pod starts, before the readiness probe passes.",
    "There are two places to change: the loader in {file} and the defaults the chart renders.",
    "The tests pass locally except the slow tier, which needs the cluster and took {n} minutes.",
    "I would keep the current layout and move only the parsing into a helper with its own tests.",
    "The database grew by {n} MB this week, mostly from the events table and its indexes.",
    "Here is a summary: the {svc} restarts line up with the cron job at midnight.",
    "The log shows {err} three times, each right after a deploy of {svc}.",
    "Nothing in {file} changed the behaviour; the difference is in the environment variables.",
    "I can open a pull request with the fix and a test that reproduces the {err} case.",
    "The note could say that {svc} was down for {n} minutes and that no data was lost.",
    "Memory stays under {n} MB at steady state, so the limit of the pod is generous.",
]
CODE = [
    "def load(path):",
    "    return parse(path.read_text())",
    "if retries > limit:",
    "    raise TimeoutError(name)",
    "for item in queue:",
    "    process(item)",
    "",
    "# TODO",
]
CALL_LINES = ["", "", "Let me look.", "Checking {file}.", "Running the tests now.", ""]


def _fill(template: str, rng: random.Random) -> str:
    return template.format(
        file=rng.choice(FILES),
        svc=rng.choice(SERVICES),
        err=rng.choice(ERRORS),
        n=rng.randint(2, 900),
    )


def _tool_output(rng: random.Random) -> str:
    """A listing, a log, a JSON document or a code excerpt: 200-3,000 characters."""
    kind = rng.randrange(4)
    lines: list[str] = []
    if kind == 0:
        for _ in range(rng.randint(6, 40)):
            size, day = rng.randint(100, 99999), rng.randint(1, 28)
            lines.append(f"-rw-r--r-- 1 app app {size:>6} Dec {day:>2} {rng.choice(FILES)}")
    elif kind == 1:
        for _ in range(rng.randint(5, 30)):
            level = rng.choice(["INFO", "INFO", "WARN", "ERROR"])
            stamp = f"2026-12-0{rng.randint(1, 9)}T{rng.randint(10, 23)}:{rng.randint(10, 59)}"
            said = _fill(rng.choice(SAYS), rng)[:90]
            lines.append(f"{stamp} {level} {rng.choice(SERVICES)}: {said}")
    elif kind == 2:
        doc = {
            s: {
                "replicas": rng.randint(1, 5),
                "status": rng.choice(["ok", "degraded"]),
                "last_error": rng.choice(ERRORS),
            }
            for s in rng.sample(SERVICES, 4)
        }
        lines.append(json.dumps(doc, indent=2))
    else:
        for _ in range(rng.randint(8, 50)):
            lines.append(rng.choice(CODE))
    return "\n".join(lines)[:3_000]


@dataclass
class Planted:
    session: str
    index: int  # the fact's message within its session
    question: str  # a paraphrase
    keywords: str = ""  # the keyword query of test_lcm_duplicates.py, where there is one


def transcript(
    messages: int, seed: int = 32, per_session: int = 200
) -> tuple[dict[str, list[dict[str, Any]]], list[Planted]]:
    """``messages`` messages in sessions of ``per_session``; the 12 facts spread over them."""
    rng = random.Random(seed)
    sessions: dict[str, list[dict[str, Any]]] = {}
    count = max(1, round(messages / per_session))
    fact_at = {i * count // len(FACTS): i for i in range(len(FACTS))} if count >= 12 else {}
    planted: list[Planted] = []
    distractors = [d for _, _, ds in FACTS for d in ds]
    for s in range(count):
        name = f"chat-{s:04d}"
        chat: list[dict[str, Any]] = []
        size = per_session if s < count - 1 else messages - per_session * (count - 1)
        here = [fact_at[s]] if s in fact_at else []
        if not fact_at:  # fewer sessions than facts: several a session
            here = [i for i in range(len(FACTS)) if i % count == s]
        turns = rng.sample(range(max(len(here), size // 8)), len(here))  # a turn is ~4 messages
        slots = dict(zip(turns, here, strict=True))
        turn = 0
        while len(chat) < size:
            fact = slots.pop(turn, None)
            chat.append({"role": "user", "content": _ask(rng, fact, distractors)})
            if fact is not None:
                planted.append(Planted(name, len(chat) - 1, FACTS[fact][1]))
            for _ in range(rng.choice([0, 1, 1, 2])):
                call_id = f"call_{len(chat)}"
                chat.append(
                    {
                        "role": "assistant",
                        "content": _fill(rng.choice(CALL_LINES), rng),
                        "tool_calls": [
                            {
                                "id": call_id,
                                "type": "function",
                                "function": {"name": "terminal", "arguments": "{}"},
                            }
                        ],
                    }
                )
                chat.append({"role": "tool", "tool_call_id": call_id, "content": _tool_output(rng)})
            reply = " ".join(_fill(rng.choice(SAYS), rng) for _ in range(rng.randint(1, 6)))
            chat.append({"role": "assistant", "content": reply})
            turn += 1
        if slots:
            raise ValueError(f"session {name} of {size} messages is too short for its facts")
        sessions[name] = chat[:size]
    return sessions, planted


def _ask(rng: random.Random, fact: int | None, distractors: list[str]) -> str:
    """A user's message: a request, sometimes with a remark; a fact is told in passing."""
    ask = _fill(rng.choice(ASKS), rng)
    opener = rng.choice(OPENERS)
    if fact is not None:
        return f"{opener} Before I forget, {FACTS[fact][0]}. Anyway: {ask}".strip()
    if rng.random() < 0.05:
        return f"{opener} By the way, {rng.choice(distractors)}. {ask}".strip()
    return f"{opener} {ask}".strip()


def describe(sessions: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    """Counts and mean lengths per role: what the throughput figures were measured on."""
    by_role: dict[str, list[int]] = {}
    for chat in sessions.values():
        for m in chat:
            by_role.setdefault(m["role"], []).append(len(m.get("content") or ""))
    every = [n for lengths in by_role.values() for n in lengths]
    return {
        "messages": len(every),
        "mean_chars": round(statistics.mean(every)),
        "median_chars": round(statistics.median(every)),
        "roles": {
            r: {"count": len(v), "mean_chars": round(statistics.mean(v))}
            for r, v in sorted(by_role.items())
        },
    }


# Paraphrases of the twelve facts of tests/integration/lcm/test_lcm_duplicates.py, in order.
KEYWORD_SET_QUESTIONS = [
    "How do I get online at the lake house?",
    "Which city does my sibling live in now?",
    "How often do we change the credentials for the test DB?",
    "What food can't my puppy eat?",
    "When do the directors meet next?",
    "Where did I leave my vehicle?",
    "When must we pay the Acme bill?",
    "Until when is my travel document valid?",
    "Which database did we pick for payments?",
    "Why did the release break?",
    "Where is the extra key hidden?",
    "How many calls can we make to the service each minute?",
]


def keyword_set() -> tuple[dict[str, list[dict[str, Any]]], list[Planted]]:
    """The 4,000-message transcript of test_lcm_duplicates.py (one copy), asked in paraphrase.

    Twelve facts among short "note" lines, each with distractors that repeat
    the words of its keyword query; here the questions share few words with
    the fact.
    """
    import importlib.util
    from pathlib import Path

    path = Path(__file__).parents[1] / "tests/integration/lcm/test_lcm_duplicates.py"
    spec = importlib.util.spec_from_file_location("lcm_duplicates_set", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    messages = module.transcript()
    texts = [m["content"] for m in messages]
    planted = [
        Planted("keyword-set", texts.index(fact), question, query)
        for (fact, _, query, _), question in zip(module.FACTS, KEYWORD_SET_QUESTIONS, strict=True)
    ]
    return {"keyword-set": messages}, planted
