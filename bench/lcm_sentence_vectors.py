"""Would a vector per sentence find the planted facts that one vector per message misses?

On a database kept by ``bench/lcm_time_to_searchable.py --keep DIR`` (agent transcripts, e5),
each of the twelve paraphrased questions is ranked against every message by plain cosine
similarity, three ways:

- ``whole``: the message's stored vector (what the index holds);
- ``sentences``: the best of the stored vector and a vector of each sentence, for every
  message of the roles given that has more than one sentence (the planted facts sit in the
  middle of such user messages: "Before I forget, <fact>. Anyway: <request>");
- ``fact_alone``: the planted fact's own sentence against the question, beside the best score
  of any other message, which tells an embedder that cannot rank the fact from a message
  that buries it.

It prints the rank of each fact's message and how many are in the top 5, one JSON object per
question and one summary line. Plain cosine, no hubness penalty and no full-text ranking: the
question is what the vectors alone can do.

Run: ``.venv/bin/python bench/lcm_sentence_vectors.py --keep DIR [--size 4000] [--roles user]``
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

import numpy as np
import runinfo
from lcm_time_to_searchable import message_ids
from lcm_transcripts import FACTS, transcript

from hermes_runtime.lcm.embed.embedders import Embedder, offline_embedder
from hermes_runtime.lcm.embed.vectorindex import decode_vectors
from hermes_runtime.lcm.store.lcmstore import LcmStore

# Sentence ends, and the transcript's own joints between a fact and the request around it.
SENTENCE_BREAK = re.compile(r"(?<=[.!?])\s+|\s*(?:Anyway:|By the way,|Before I forget,)\s*")
MIN_SENTENCE_CHARS = 12


def sentences(text: str) -> list[str]:
    return [s for s in SENTENCE_BREAK.split(text) if len(s) >= MIN_SENTENCE_CHARS]


def unit(matrix: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(matrix, axis=-1, keepdims=True)
    return np.asarray(matrix / np.where(norms > 0, norms, 1.0), dtype=np.float32)


def stored_vectors(store: LcmStore, ids: list[int]) -> np.ndarray:
    """The stored e5 vector of each message id, in order (unit length)."""
    rows = dict(
        (int(item), (bytes(blob), int(dim)))
        for item, blob, dim in store.conn.execute(
            "SELECT item_id, vector, dim FROM embeddings WHERE kind = 'message'"
        ).fetchall()
    )
    dim = next(iter(rows.values()))[1]
    quantized, scales = decode_vectors([rows[i][0] for i in ids], dim)
    return unit(quantized.astype(np.float32) * scales[:, None])


def sentence_vectors(
    embedder: Embedder, messages: list[tuple[int, str, str]], roles: set[str]
) -> tuple[np.ndarray, np.ndarray]:
    """A vector per sentence of each message of ``roles`` with more than one; their rows."""
    texts, owners = [], []
    for row, (_id, role, content) in enumerate(messages):
        parts = sentences(content) if role in roles else []
        if len(parts) > 1:
            texts += parts
            owners += [row] * len(parts)
    if not texts:
        return np.zeros((0, 1), dtype=np.float32), np.zeros(0, dtype=np.int64)
    return unit(embedder.embed(texts)), np.asarray(owners, dtype=np.int64)


def rank_of(scores: np.ndarray, row: int) -> int:
    return int((scores > scores[row]).sum())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keep", type=Path, required=True, help="lcm_time_to_searchable's DIR")
    parser.add_argument("--size", type=int, default=4_000)
    parser.add_argument("--roles", default="user")
    args = parser.parse_args()
    home = args.keep / f"agent-{args.size}-e5"
    if not (home / "lcm.db").is_file():
        parser.error(f"{home}/lcm.db: none kept; run lcm_time_to_searchable.py --keep first")
    runinfo.announce()
    _sessions, planted = transcript(args.size)
    store = LcmStore(home / "lcm.db", home / "outputs", readonly=True)
    embedder = offline_embedder("e5")
    messages = [
        (int(i), str(role), str(content))
        for i, role, content in store.conn.execute(
            "SELECT id, role, content FROM messages ORDER BY id"
        ).fetchall()
    ]
    fact_text = {asked: told for told, asked, _keywords in FACTS}
    row_of = {ident: row for row, (ident, _r, _c) in enumerate(messages)}
    whole_matrix = stored_vectors(store, [ident for ident, _r, _c in messages])
    parts, owners = sentence_vectors(embedder, messages, set(args.roles.split(",")))
    found = {"whole": 0, "sentences": 0}
    for index, (question, message_id) in enumerate(message_ids(store, planted, False)):
        query = unit(np.asarray(embedder.embed_query(question), dtype=np.float32).reshape(-1))
        whole = whole_matrix @ query
        best = whole.copy()
        if len(parts):
            np.maximum.at(best, owners, parts @ query)
        row = row_of[message_id]
        fact = planted[index]
        alone = float(unit(embedder.embed([fact_text[question]]))[0] @ query)
        others = float(np.delete(whole, row).max())
        ranks = {"whole": rank_of(whole, row), "sentences": rank_of(best, row)}
        for way, rank in ranks.items():
            found[way] += rank < 5
        print(
            json.dumps(
                {
                    "fact": index,
                    "session": fact.session,
                    **ranks,
                    "fact_alone": round(alone, 3),
                    "best_other": round(others, 3),
                }
            )
        )
    store.close()
    print(
        json.dumps(
            {
                "size": args.size,
                "sentences": len(parts),
                **{f"{k}_top5": f"{v}/{len(planted)}" for k, v in found.items()},
            }
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
