"""Recall tools tried beside the vector index's ranking; each is kept only where the eval improves.

Three sets, every item embedded by e5 as LCM stores it: the retrieval eval's 60 facts
(bench/lcm_retrieval_eval.py; its tune and held-out halves), the 12-fact transcript
(``lcm_time_to_searchable.py --corpus keyword``) and a 4,000-message agent transcript
(``--sizes 4000``). Each paraphrased question is ranked by the real ``VectorIndex``
over every stored message (summaries left out, copies folded by text, as hybrid search
does), and by these variants of it:

- ``cosine``: the index without its hubness penalty (``hub_weight=0``);
- ``hubness``: the index as LCM runs it (the default);
- ``recency``: plus 0.01 x the item's position (0 the oldest message, 1 the newest);
- ``expanded``: the question's vector plus 0.3 x the mean of its top 3, searched again
  (pseudo-relevance feedback);
- ``chunks``: every user or assistant message of two sentences or more also embedded
  sentence by sentence, a sentence's hit standing for its message.

Prints one JSON object: facts found in the top 5, per set and variant.
Run: ``.venv/bin/python bench/lcm_recall_variants.py`` (about a minute and a half here).
"""

from __future__ import annotations

import json
import re
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import lcm_retrieval_eval as retrieval_eval
import lcm_time_to_searchable as searchable
import numpy as np
import runinfo
from lcm_transcripts import keyword_set, transcript

from hermes_runtime.lcm.config import LcmConfig
from hermes_runtime.lcm.embed.embedbatch import embed_all
from hermes_runtime.lcm.embed.embedders import Embedder, offline_embedder
from hermes_runtime.lcm.embed.embedjob import embed_database
from hermes_runtime.lcm.embed.vectorindex import VectorIndex, decode_vectors
from hermes_runtime.lcm.engine.lcmengine import LcmEngine
from hermes_runtime.lcm.search.hits import content_key
from hermes_runtime.lcm.store.lcmstore import LcmStore

TOP = 5
RECENCY_WEIGHT = 0.01
EXPANSION_WEIGHT, EXPANSION_HITS = 0.3, 3
SENTENCES = re.compile(r"(?<=[.!?])\s+|\s*(?:Anyway:|By the way,)\s*")


@dataclass
class Case:
    question: str
    accepted: set[str]  # the fact's message and every summary that expands to it


@dataclass
class Corpus:
    store: LcmStore
    cases: list[Case]
    texts: dict[int, str]  # message id -> content (copies fold by role and content)
    roles: dict[int, str]
    newest: int
    model: str


Ranker = Callable[[Corpus, np.ndarray, VectorIndex], list[int]]


def corpus(store: LcmStore, cases: list[Case], model: str) -> Corpus:
    rows = store.conn.execute("SELECT id, role, content FROM messages").fetchall()
    texts = {int(i): str(content or "") for i, _, content in rows}
    roles = {int(i): str(role) for i, role, _ in rows}
    return Corpus(store, cases, texts, roles, max(texts), model)


def eval_set(home: Path, embedder: Embedder) -> Corpus:
    engine = LcmEngine(LcmConfig.for_home(home, {"embeddings": "off"}), embedder=embedder)
    built = retrieval_eval.build(engine)
    embed_all(engine.store, embedder)
    cases = [Case(q, retrieval_eval.leads_to(engine, ref)) for q, ref in built]
    return corpus(engine.store, cases, embedder.model)


def transcript_set(home: Path, embedder: Embedder, keyword: bool) -> Corpus:
    sessions, planted = keyword_set() if keyword else transcript(4000)
    searchable.import_sessions(home, sessions)
    store = LcmStore(home / "lcm.db", home / "outputs", create=False)
    embed_database(store, embedder)
    ids = searchable.message_ids(store, planted, False)
    cases = [Case(q, searchable.leads_to(store, m)) for q, m in ids]
    return corpus(store, cases, embedder.model)


def top_messages(found: list[tuple[str, int, float]], data: Corpus) -> list[int]:
    """The first TOP distinct messages of a ranking (a summary or a copy takes no slot)."""
    seen: set[bytes] = set()
    top: list[int] = []
    for kind, item, _ in found:
        key = content_key(data.roles.get(item), data.texts.get(item))  # as hybrid search folds
        if kind != "message" or key in seen or item in top:
            continue
        seen.add(key)
        top.append(item)
        if len(top) == TOP:
            break
    return top


def ranked(data: Corpus, query: np.ndarray, index: VectorIndex) -> list[tuple[str, int, float]]:
    return index.search(data.store, data.model, query, None, len(data.texts) * 3)


def plain(data: Corpus, query: np.ndarray, index: VectorIndex) -> list[int]:
    return top_messages(ranked(data, query, index), data)


def recency(data: Corpus, query: np.ndarray, index: VectorIndex) -> list[int]:
    found = [
        (kind, item, score + RECENCY_WEIGHT * item / data.newest)
        for kind, item, score in ranked(data, query, index)
    ]
    return top_messages(sorted(found, key=lambda hit: -hit[2]), data)


def expanded(data: Corpus, query: np.ndarray, index: VectorIndex) -> list[int]:
    first = plain(data, query, index)[:EXPANSION_HITS]
    rows = data.store.conn.execute(
        f"SELECT vector FROM embeddings WHERE model = ? AND kind = 'message' "
        f"AND item_id IN ({','.join('?' * len(first))})",
        (data.model, *first),
    ).fetchall()
    quantized, scales = decode_vectors([bytes(r[0]) for r in rows], len(query))
    mean = (quantized.astype(np.float32) * scales[:, None]).mean(axis=0)
    wider = query + EXPANSION_WEIGHT * mean
    return plain(data, (wider / np.linalg.norm(wider)).astype(np.float32), index)


def with_chunks(data: Corpus, embedder: Embedder) -> VectorIndex:
    """An index holding every message and, for longer ones, each sentence under its id."""
    owners, sentences = [], []
    for item, text in data.texts.items():
        if data.roles[item] == "tool":
            continue
        parts = [p.strip() for p in SENTENCES.split(text) if p and len(p.strip()) > 20]
        if len(parts) >= 2:
            owners += [item] * len(parts)
            sentences += parts
    index = VectorIndex()
    index.search(data.store, data.model, embedder.embed_query("load"), None, 1)  # stored rows first
    if sentences:
        sessions = ["chunks"] * len(owners)
        index.add_unsaved(data.model, ["message"] * len(owners), owners, sessions,
                          np.asarray(embedder.embed(sentences), dtype=np.float32))  # fmt: skip
    return index


def found(data: Corpus, embedder: Embedder, rank: Ranker, index: VectorIndex) -> list[bool]:
    hits = []
    for case in data.cases:
        query = np.asarray(embedder.embed_query(case.question), dtype=np.float32)
        hits.append(any(f"msg_{item}" in case.accepted for item in rank(data, query, index)))
    return hits


def figures(name: str, data: Corpus, embedder: Embedder) -> dict[str, str]:
    variants: dict[str, tuple[Ranker, VectorIndex]] = {
        "cosine": (plain, VectorIndex(hub_weight=0.0)),
        "hubness": (plain, VectorIndex()),
        "recency": (recency, VectorIndex()),
        "expanded": (expanded, VectorIndex()),
        "chunks": (plain, with_chunks(data, embedder)),
    }
    out = {}
    for variant, (rank, index) in variants.items():
        hits = found(data, embedder, rank, index)
        if name == "eval":  # the halves of bench/lcm_retrieval_eval.py: even facts tune
            tune, held = hits[0::2], hits[1::2]
            out[variant] = f"{sum(tune)}/{len(tune)} tune, {sum(held)}/{len(held)} held out"
        else:
            out[variant] = f"{sum(hits)}/{len(hits)}"
    return out


def main() -> int:
    runinfo.announce()
    embedder = offline_embedder("e5", threads=2)
    results: dict[str, dict[str, str]] = {}
    with tempfile.TemporaryDirectory(prefix="lcm-variants-") as tmp:
        builders = {
            "eval": lambda home: eval_set(home, embedder),
            "keyword_transcript": lambda home: transcript_set(home, embedder, keyword=True),
            "agent_transcript": lambda home: transcript_set(home, embedder, keyword=False),
        }
        for name, build in builders.items():
            home = Path(tmp) / name
            home.mkdir()
            data = build(home)
            results[name] = figures("eval" if name == "eval" else name, data, embedder)
            data.store.close()
    print(json.dumps({"top": TOP, "found": results}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
