"""Hybrid search: full-text and vector rankings fused by reciprocal rank fusion.

Why a module of its own: questions are often worded unlike the messages
that answer them, so hybrid search ranks by any selective term (full-text)
and by meaning (vectors of the embedder's model), then fuses the two
rankings. Reciprocal rank fusion needs no calibration between bm25 and
cosine scores; rankings carry ids only, and rows are read for the results
returned.
"""

from __future__ import annotations

from dataclasses import dataclass

from hermes_runtime.lcm.embed.embedders import Embedder
from hermes_runtime.lcm.embed.vectorindex import VectorIndex
from hermes_runtime.lcm.search import searchreads
from hermes_runtime.lcm.search.diversity import diversified
from hermes_runtime.lcm.search.ftsquery import quoted_terms
from hermes_runtime.lcm.search.hits import MAX_IDS, OVERSAMPLE, Hit, content_key, hit_for, ref
from hermes_runtime.lcm.search.textsearch import MAX_RESULTS
from hermes_runtime.lcm.store import messagereads
from hermes_runtime.lcm.store.lcmstore import LcmStore
from hermes_runtime.lcm.store.timewindow import IdWindow

Ranking = list[tuple[str, int, float]]  # (kind, id, score), best first
Item = tuple[str, int]  # (kind, id)


@dataclass(frozen=True)
class Fusion:
    """How hybrid search builds its full-text query and fuses the two rankings.

    Reciprocal rank fusion: an item scores ``weight / (rrf_k + rank)`` in each
    ranking. The defaults are chosen on the tuning half of the evaluation
    set and checked on the held-out half (``bench/lcm_retrieval_eval.py``;
    its figures are in docs/benchmarks.md).
    """

    # Chosen on the tuning half with vector scores carrying the hubness penalty
    # (vectorindex.py): a small rrf_k lets the top ranks of either list decide.
    rrf_k: int = 5
    fts_weight: float = 1.0
    vector_weight: float | None = None  # None: the embedder's own ``rank_weight``
    depth: int = 30  # candidates taken from each ranking (at least 3x the limit)
    prefix: bool = False  # full-text terms also match as prefixes ("meet" finds "meeting")
    # Rank messages only: a summary restates messages that are indexed too,
    # and on the evaluation set summaries crowded the facts out of the top 5
    # (ranking messages only raised recall@5 on both halves). Every
    # message hit names the summary covering it (``covered_by``), and grep
    # still searches summaries.
    summaries: bool = False
    # full-text terms matching more rows than both of these are left out of
    # the OR query (see selective_or_query): 20k rows at 1M messages
    common_term_docs: int = 5_000
    common_term_share: float = 0.02
    # A result sharing more than this share of its words with a better one waits behind the
    # results that do not (diversity.py): near-copies no longer fill the top. 1.0: off.
    near_copy_overlap: float = 0.3


DEFAULT_FUSION = Fusion()


def selective_or_query(store: LcmStore, text: str, fusion: Fusion) -> str | None:
    """The OR query of a question without the terms that match too much of the history.

    FTS5 scores every row matching an OR query before ``ORDER BY rank LIMIT``, and
    ranking a common term costs far more than counting it. Terms matching more than
    ``common_term_docs`` rows and ``common_term_share`` of all messages add little
    to bm25 (a low IDF), so they are dropped; the rarest term always stays. Below
    ``common_term_docs`` messages nothing can be dropped and nothing is counted.
    """
    quoted = quoted_terms(text, any_term=True, prefix=fusion.prefix)
    if not quoted:
        return None
    total = messagereads.top_id(store, "messages")
    if len(quoted) > 1 and total > fusion.common_term_docs:
        ceiling = max(fusion.common_term_docs, fusion.common_term_share * total)
        conn = store.searchable()
        counted = [(searchreads.term_matches(conn, term), term) for term in quoted]
        quoted = [term for count, term in counted if count <= ceiling] or [min(counted)[1]]
    return " OR ".join(quoted)


def vector_search(
    store: LcmStore,
    embedder: Embedder,
    query: str,
    session_id: str | None,
    limit: int,
    index: VectorIndex | None = None,
) -> list[Hit]:
    """Nearest items by cosine less hubness (vectorindex.py), among the model's own vectors."""
    found = _vector_ranking(store, embedder, query, session_id, limit, index)
    return [h for k, i, score in found if (h := hit_for(store, k, i, score)) is not None]


def hybrid_search(
    store: LcmStore,
    embedder: Embedder | None,
    query: str,
    session_id: str | None = None,
    limit: int = 10,
    mode: str = "hybrid",
    index: VectorIndex | None = None,
    fusion: Fusion = DEFAULT_FUSION,
    window: IdWindow | None = None,
) -> list[Hit]:
    """Reciprocal rank fusion of full-text (any term) and vector rankings, copies folded.

    Each ranking reads ``OVERSAMPLE`` candidates per slot and keeps the first
    of each content, so a message repeated twenty times takes one slot, not
    twenty. Rankings carry ids only; rows, snippets and ``covered_by`` are
    fetched for the ``limit`` results returned, not for every candidate.
    ``window`` (a time window's ids) filters both rankings before their top
    candidates are taken, so older matches never crowd the window out.
    """
    limit = max(1, min(limit, MAX_RESULTS))  # the model picks it: bounded like lcm_grep's
    depth = max(limit * 3, fusion.depth)
    pool = depth * OVERSAMPLE
    rankings: list[tuple[float, Ranking]] = []
    if mode in ("hybrid", "fts"):
        fts = selective_or_query(store, query, fusion)
        if fts:
            ranking = _fts_ranking(store, fts, session_id, pool, fusion.summaries, window)
            rankings.append((fusion.fts_weight, ranking))
    if mode in ("hybrid", "vector") and embedder is not None:
        vector = _vector_ranking(store, embedder, query, session_id, pool, index, window)
        weight = fusion.vector_weight
        rankings.append((embedder.rank_weight if weight is None else weight, vector))
    if not fusion.summaries:
        rankings = [(w, [r for r in ranking if r[0] == "message"]) for w, ranking in rankings]
    contents = _contents(store, [item for _, ranking in rankings for item in ranking])
    copies = _copies([item for _, ranking in rankings for item in ranking], contents)
    distinct = [(w, _first_copies(ranking, copies)[:depth]) for w, ranking in rankings]
    scores = _fused(distinct, fusion.rrf_k)
    ordered = sorted(scores, key=lambda key: -scores[key])
    ordered = diversified(
        ordered, lambda item: _text(contents, item), fusion.near_copy_overlap, limit
    )
    return _top_hits(store, ordered, scores, copies, limit)


def _top_hits(
    store: LcmStore,
    ordered: list[Item],
    scores: dict[Item, float],
    copies: dict[Item, list[Item]],
    limit: int,
) -> list[Hit]:
    """The first ``limit`` fused items that still exist, as hits carrying their copies."""
    hits: list[Hit] = []
    for kind, item_id in ordered:
        hit = hit_for(store, kind, item_id, round(scores[(kind, item_id)], 6))
        if hit is not None:
            same = copies.get((kind, item_id), [(kind, item_id)])
            hit.count = len(same)
            hit.ids = [ref(k, i) for k, i in same[:MAX_IDS]]
            hits.append(hit)
        if len(hits) == limit:
            break
    return hits


def _vector_ranking(
    store: LcmStore,
    embedder: Embedder,
    query: str,
    session_id: str | None,
    limit: int,
    index: VectorIndex | None,
    window: IdWindow | None = None,
) -> Ranking:
    vector = embedder.embed_query(query)
    found = index or VectorIndex()
    return found.search(store, embedder.model, vector, session_id, limit, window)


def _fts_ranking(
    store: LcmStore,
    query: str,
    session_id: str | None,
    limit: int,
    summaries: bool = True,
    window: IdWindow | None = None,
) -> Ranking:
    """Ids and ranks only, best first: FTS5's ``ORDER BY rank`` path, no snippets."""
    conn = store.searchable()
    kinds = ("message", "summary") if summaries else ("message",)
    ranked = [
        (kind, item_id, -rank)
        for kind in kinds
        for item_id, rank in searchreads.ranked_ids(conn, kind, query, session_id, limit, window)
    ]
    return sorted(ranked, key=lambda r: -r[2])[:limit]


def _copies(ranked: Ranking, contents: dict[Item, tuple[bytes, str]]) -> dict[Item, list[Item]]:
    """Each candidate's copies among all candidates (same content), first-seen order.

    Every copy maps to the same list, whose first item stands for the group.
    """
    order = list(dict.fromkeys((kind, item_id) for kind, item_id, _ in ranked))
    groups: dict[bytes, list[Item]] = {}
    for item in order:
        known = contents.get(item)
        key = known[0] if known else item[0].encode() + str(item[1]).encode()
        groups.setdefault(key, []).append(item)
    return {item: group for group in groups.values() for item in group}


def _text(contents: dict[Item, tuple[bytes, str]], item: Item) -> str | None:
    known = contents.get(item)
    return None if known is None else known[1]


def _contents(store: LcmStore, ranked: Ranking) -> dict[Item, tuple[bytes, str]]:
    """``(content_key, text)`` of the candidates, messages and summaries: a few IN queries."""
    items = list(dict.fromkeys((kind, item_id) for kind, item_id, _ in ranked))
    found: dict[Item, tuple[bytes, str]] = {}
    for kind in ("message", "summary"):
        ids = [item_id for k, item_id in items if k == kind]
        for item_id, role, text in searchreads.contents(store, kind, ids):
            found[(kind, int(item_id))] = (content_key(role, text), text or "")
    return found


def _first_copies(ranking: Ranking, copies: dict[Item, list[Item]]) -> Ranking:
    """The ranking with one entry per content, named by its group's representative."""
    seen: set[Item] = set()
    distinct = []
    for kind, item_id, score in ranking:
        head = copies.get((kind, item_id), [(kind, item_id)])[0]
        if head not in seen:
            seen.add(head)
            distinct.append((head[0], head[1], score))
    return distinct


def _fused(rankings: list[tuple[float, Ranking]], rrf_k: int) -> dict[Item, float]:
    """Weighted reciprocal rank fusion: no score calibration between rankings needed."""
    scores: dict[Item, float] = {}
    for weight, ranking in rankings:
        for rank, (kind, item_id, _score) in enumerate(ranking):
            key = (kind, item_id)
            scores[key] = scores.get(key, 0.0) + weight / (rrf_k + rank + 1)
    return scores
