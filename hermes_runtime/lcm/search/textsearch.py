"""grep: full-text (FTS5) or regex search over messages and summaries, copies folded.

Why a module of its own: the agent's ``lcm_grep`` and ``hermes-runtime lcm
grep`` want every term (or a pattern) matched and snippets of the match,
unlike hybrid search, which ranks by any term and by meaning. Snippets are
cut only for the results returned, in one batch (``fulltext.snippets``).
"""

from __future__ import annotations

from functools import partial
from typing import Any

import apsw

from hermes_runtime.lcm.search import searchreads
from hermes_runtime.lcm.search.ftsquery import fts_query
from hermes_runtime.lcm.search.hits import (
    Candidate,
    Hit,
    content_key,
    distinct,
    message_hit,
    ref,
    summary_hit,
)
from hermes_runtime.lcm.store.fulltext import snippets
from hermes_runtime.lcm.store.lcmstore import LcmStore
from hermes_runtime.lcm.store.patterns import check_pattern
from hermes_runtime.lcm.store.timewindow import IdWindow

MAX_RESULTS = 200


def grep(
    store: LcmStore,
    query: str,
    session_id: str | None = None,
    limit: int = 20,
    regex: bool = False,
    any_term: bool = False,
    window: IdWindow | None = None,
) -> list[Hit]:
    """Full-text (or regex) search over messages and summaries, best first, copies folded.

    ``window``: only what was written in that time window (filtered in each query).
    """
    limit = max(1, min(limit, MAX_RESULTS))
    if regex:
        check_pattern(query)  # RE2: linear time, whatever the model sends
        return distinct(lambda n: _regex_candidates(store, query, session_id, n, window), limit)
    fts = fts_query(query, any_term)
    if fts is None:
        return []
    conn = store.searchable()  # the index caught up once, for every read below
    texts: dict[str, str] = {}  # ref -> stored text of every candidate read
    hits: list[Hit] = []
    for kind in ("message", "summary"):
        read = partial(
            _fts_candidates, store, conn, kind, fts, session_id, texts=texts, window=window
        )
        hits += distinct(read, limit)
    best = sorted(hits, key=lambda h: -h.score)[:limit]
    cut = snippets(conn, fts, {n: texts[hit.id] for n, hit in enumerate(best)})
    for n, hit in enumerate(best):
        hit.snippet = cut.get(n, "")
    return best


def _fts_candidates(
    store: LcmStore,
    conn: apsw.Connection,
    kind: str,
    query: str,
    session_id: str | None,
    limit: int,
    texts: dict[str, str],
    window: IdWindow | None = None,
) -> list[Candidate]:
    """``conn``: ``store.searchable()``, caught up once for the whole search."""
    rows = searchreads.grep_rows(conn, kind, query, session_id, limit, window)
    texts.update((ref(kind, r[0]), r[6]) for r in rows)
    return [
        (content_key(r[2], r[6]), ref(kind, r[0]), partial(_fts_hit, store, kind, r)) for r in rows
    ]


def _fts_hit(store: LcmStore, kind: str, row: tuple[Any, ...]) -> Hit:
    """A hit from a ``grep_rows`` row; its snippet is cut later, for the results kept."""
    item_id, session_id, role, seq, created_at, rank, _text = row
    if kind == "message":
        return message_hit(store, (item_id, session_id, role, seq, created_at, ""), -float(rank))
    return summary_hit(item_id, session_id, "", created_at, -float(rank))


def _regex_candidates(
    store: LcmStore,
    pattern: str,
    session_id: str | None,
    limit: int,
    window: IdWindow | None = None,
) -> list[Candidate]:
    rows = searchreads.regex_rows(store, pattern, session_id, limit, window)
    return [
        (content_key(r[2], r[6]), ref("message", r[0]), partial(message_hit, store, r[:6], 0.0))
        for r in rows
    ]
