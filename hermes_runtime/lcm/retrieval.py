"""grep, hybrid search, describe, expand, read an output: how the agent gets history back.

Queries are parsed into quoted FTS5 terms, so user text can never inject
FTS syntax (a stray ``"`` or ``NEAR(`` is just a word). Hybrid search fuses
full-text and vector rankings with reciprocal rank fusion, which needs no
score calibration between the two.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from functools import partial
from typing import Any

import apsw

from hermes_runtime.common.errors import RuntimeFailure
from hermes_runtime.lcm import outputs as out
from hermes_runtime.lcm.embeddings import Embedder, VectorIndex
from hermes_runtime.lcm.fulltext import ATTACHED_AS, snippets
from hermes_runtime.lcm.records import (
    MESSAGE_PREFIX,
    OUTPUT_PREFIX,
    SUMMARY_PREFIX,
    StoredMessage,
    Summary,
)
from hermes_runtime.lcm.schema import fetch_all, fetch_one, fetch_value
from hermes_runtime.lcm.store import LcmStore

TERM = re.compile(r"\w+", re.UNICODE)


@dataclass(frozen=True)
class Fusion:
    """How hybrid search builds its full-text query and fuses the two rankings.

    Reciprocal rank fusion: an item scores ``weight / (rrf_k + rank)`` in each
    ranking. The defaults were chosen on the tuning half of the evaluation
    set and checked on the held-out half (bench/lcm_retrieval_eval.py,
    docs/benchmarks.md).
    """

    rrf_k: int = 60
    fts_weight: float = 1.0
    vector_weight: float | None = None  # None: the embedder's own ``rank_weight``
    depth: int = 60  # candidates taken from each ranking (at least 3x the limit)
    prefix: bool = False  # full-text terms also match as prefixes ("meet" finds "meeting")
    # Rank messages only: a summary restates messages that are indexed too,
    # and on the evaluation set summaries crowded the facts out of the top 5
    # (e5 hybrid recall@5 0.53/0.57 -> 0.63/0.63 on tune/held-out). Every
    # message hit names the summary covering it (``covered_by``), and grep
    # still searches summaries.
    summaries: bool = False
    # full-text terms matching more rows than both of these are left out of
    # the OR query (see _selective_or_query): 20k rows at 1M messages
    common_term_docs: int = 5_000
    common_term_share: float = 0.02


DEFAULT_FUSION = Fusion()


@dataclass
class Hit:
    id: str
    kind: str
    session_id: str
    snippet: str
    role: str | None = None
    seq: int | None = None
    created_at: float | None = None
    covered_by: str | None = None
    score: float = 0.0
    count: int = 1  # items with this exact content (role and text) among the candidates
    ids: list[str] = field(default_factory=list)  # their ids, best first (at most MAX_IDS)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


# Identical contents fold into one hit (``count``, ``ids``): a fact repeated
# twenty times (a transcript imported again, a tool output fetched over and
# over) otherwise fills the whole result list with copies of one message and
# pushes every other match out. Rankings read ``OVERSAMPLE`` times the number
# of results asked for; grep reads ``FIRST_READ`` times first (each candidate
# row is a random read of the messages table, cold on a large database), then
# four times more at each pass while copies keep crowding, up to
# ``MAX_CANDIDATES``.
OVERSAMPLE = 20
FIRST_READ = 2
MAX_CANDIDATES = 20_000
MAX_IDS = 50


_STOPWORD_TEXT = (
    "a an and are as at be by can could did do does for from had has have how i if in "
    "is it its me my no not of on or our so than that the their them then there these "
    "they this to too up us was we were what when where which who why will with would "
    "you your"
)
STOPWORDS = frozenset(_STOPWORD_TEXT.split(" "))


def fts_query(text: str, any_term: bool = False, prefix: bool = False) -> str | None:
    """Quote every word: safe against FTS5 syntax, AND by default, OR for recall.

    The OR form (used by hybrid search for questions) drops stopwords, which
    would otherwise match nearly every message. ``prefix`` lets terms of four
    letters or more match as prefixes (a quoted term followed by ``*``).
    """
    quoted = _quoted_terms(text, any_term, prefix)
    return (" OR " if any_term else " ").join(quoted) if quoted else None


def _quoted_terms(text: str, any_term: bool, prefix: bool) -> list[str]:
    terms = TERM.findall(text)[:32]
    if any_term:
        terms = [t for t in terms if t.lower() not in STOPWORDS] or terms
    return [f'"{t}"*' if prefix and len(t) >= 4 else f'"{t}"' for t in terms]


def _selective_or_query(store: LcmStore, text: str, fusion: Fusion) -> str | None:
    """The OR query of a question without the terms that match too much of the history.

    FTS5 scores every row matching an OR query before ``ORDER BY rank
    LIMIT``: at 1M messages a term found in 12% of them cost 120 ms to rank
    but 5 ms to count. Terms matching more than ``common_term_docs`` rows
    and ``common_term_share`` of all messages add little to bm25 (a low
    IDF), so they are dropped; the rarest term always stays. Below
    ``common_term_docs`` messages nothing can be dropped and nothing is counted.
    """
    quoted = _quoted_terms(text, any_term=True, prefix=fusion.prefix)
    if not quoted:
        return None
    total = int(fetch_value(store.conn, "SELECT coalesce(max(id), 0) FROM messages"))
    if len(quoted) > 1 and total > fusion.common_term_docs:
        ceiling = max(fusion.common_term_docs, fusion.common_term_share * total)
        conn = store.searchable()
        counted = [(int(fetch_value(conn, MATCH_COUNT, (term,))), term) for term in quoted]
        quoted = [term for count, term in counted if count <= ceiling] or [min(counted)[1]]
    return " OR ".join(quoted)


MATCH_COUNT = f"SELECT count(*) FROM {ATTACHED_AS}.messages_fts WHERE messages_fts MATCH ?"


def _covered_by(store: LcmStore, message_id: int) -> str | None:
    row = fetch_one(
        store.conn,
        "SELECT summary_id FROM summary_sources WHERE message_id = ? LIMIT 1",
        (message_id,),
    )
    return f"{SUMMARY_PREFIX}{row[0]}" if row else None


def content_key(role: str | None, text: str | None) -> bytes:
    """What makes two items the same result: role and exact text."""
    data = f"{role or ''}\x00{text or ''}".encode()
    return hashlib.blake2b(data, digest_size=16).digest()


def _message_hit(store: LcmStore, row: tuple[Any, ...], score: float) -> Hit:
    message_id, session_id, role, seq, created_at, snippet = row
    return Hit(
        id=f"{MESSAGE_PREFIX}{message_id}",
        kind="message",
        session_id=session_id,
        snippet=snippet,
        role=role,
        seq=seq,
        created_at=created_at,
        covered_by=_covered_by(store, message_id),
        score=score,
    )


# A candidate before it becomes a Hit: (content key, ref, build the Hit).
Candidate = tuple[bytes, str, Callable[[], Hit]]


def _fts_messages(
    store: LcmStore,
    conn: apsw.Connection,
    query: str,
    session_id: str | None,
    limit: int,
    texts: dict[str, str],
) -> list[Candidate]:
    """``conn``: ``store.searchable()``, caught up once for the whole search."""
    where, params = ("AND m.session_id = ?", [session_id]) if session_id else ("", [])
    rows = fetch_all(
        conn,
        "SELECT m.id, m.session_id, m.role, m.seq, m.created_at, bm25(messages_fts), "
        "coalesce(m.content, m.content_json, '') "
        f"FROM {ATTACHED_AS}.messages_fts JOIN messages m ON m.id = messages_fts.rowid "
        f"WHERE messages_fts MATCH ? {where} ORDER BY bm25(messages_fts) LIMIT ?",
        [query, *params, limit],
    )
    texts.update((f"{MESSAGE_PREFIX}{r[0]}", r[6]) for r in rows)
    return [
        (
            content_key(r[2], r[6] or None),
            f"{MESSAGE_PREFIX}{r[0]}",
            partial(_message_hit, store, (*r[:5], ""), -float(r[5])),
        )
        for r in rows
    ]


def _fts_summaries(
    conn: apsw.Connection, query: str, session_id: str | None, limit: int, texts: dict[str, str]
) -> list[Candidate]:
    where, params = ("AND s.session_id = ?", [session_id]) if session_id else ("", [])
    rows = fetch_all(
        conn,
        "SELECT s.id, s.session_id, s.depth, s.created_at, bm25(summaries_fts), s.content "
        f"FROM {ATTACHED_AS}.summaries_fts JOIN summaries s ON s.id = summaries_fts.rowid "
        f"WHERE summaries_fts MATCH ? {where} ORDER BY bm25(summaries_fts) LIMIT ?",
        [query, *params, limit],
    )
    texts.update((f"{SUMMARY_PREFIX}{r[0]}", r[5]) for r in rows)
    return [
        (
            content_key("summary", r[5]),
            f"{SUMMARY_PREFIX}{r[0]}",
            partial(_summary_hit, (*r[:4], "", r[4])),
        )
        for r in rows
    ]


def _summary_hit(row: tuple[Any, ...]) -> Hit:
    summary_id, session_id, _depth, created_at, snippet, rank = row[:6]
    return Hit(
        f"{SUMMARY_PREFIX}{summary_id}",
        "summary",
        session_id,
        snippet,
        created_at=created_at,
        score=-float(rank),
    )


def fold_copies(candidates: Iterable[Candidate], limit: int) -> tuple[list[Hit], bool]:
    """The first ``limit`` distinct results, each carrying its copies; and whether more exist.

    Copies of one content rank together (same text, same score), so once a
    later distinct result was seen, every earlier group is complete.
    """
    groups: dict[bytes, Hit] = {}
    for key, ref, build in candidates:
        hit = groups.get(key)
        if hit is None:
            if len(groups) == limit:
                return list(groups.values()), True
            hit = groups[key] = build()
            hit.ids = [ref]
            continue
        hit.count += 1
        if len(hit.ids) < MAX_IDS:
            hit.ids.append(ref)
    return list(groups.values()), False


def _distinct(fetch: Callable[[int], list[Candidate]], limit: int) -> list[Hit]:
    """Best-first distinct results, reading more candidates while copies crowd them out."""
    wanted = max(limit * FIRST_READ, 50)
    while True:
        candidates = fetch(wanted)
        hits, complete = fold_copies(candidates, limit)
        if complete or len(candidates) < wanted or wanted >= MAX_CANDIDATES:
            return hits
        wanted = min(wanted * 4, MAX_CANDIDATES)


def grep(
    store: LcmStore,
    query: str,
    session_id: str | None = None,
    limit: int = 20,
    regex: bool = False,
    any_term: bool = False,
) -> list[Hit]:
    """Full-text (or regex) search over messages and summaries, best first, copies folded."""
    limit = max(1, min(limit, 200))
    if regex:
        _check_regex(query)
        return _distinct(lambda n: _regex_messages(store, query, session_id, n), limit)
    fts = fts_query(query, any_term)
    if fts is None:
        return []
    conn = store.searchable()  # the index caught up once, for every read below
    texts: dict[str, str] = {}  # ref -> stored text of every candidate read
    hits = _distinct(lambda n: _fts_messages(store, conn, fts, session_id, n, texts), limit)
    hits += _distinct(lambda n: _fts_summaries(conn, fts, session_id, n, texts), limit)
    best = sorted(hits, key=lambda h: -h.score)[:limit]
    # Snippets of the results returned only, cut in one batch (``fulltext.snippets``).
    cut = snippets(conn, fts, {n: texts[hit.id] for n, hit in enumerate(best)})
    for n, hit in enumerate(best):
        hit.snippet = cut.get(n, "")
    return best


def _check_regex(pattern: str) -> None:
    try:
        re.compile(pattern)
    except re.error as exc:
        raise RuntimeFailure(f"LCM grep: invalid regular expression {pattern!r}: {exc}") from exc


def _regex_messages(
    store: LcmStore, pattern: str, session_id: str | None, limit: int
) -> list[Candidate]:
    where, params = ("session_id = ? AND", [session_id]) if session_id else ("", [])
    rows = fetch_all(
        store.conn,
        "SELECT id, session_id, role, seq, created_at, "
        "substr(coalesce(content, content_json), 1, 300), coalesce(content, content_json) "
        f"FROM messages WHERE {where} coalesce(content, content_json) REGEXP ? "
        "ORDER BY id DESC LIMIT ?",
        [*params, pattern, limit],
    )
    return [
        (
            content_key(r[2], r[6]),
            f"{MESSAGE_PREFIX}{r[0]}",
            partial(_message_hit, store, r[:6], 0.0),
        )
        for r in rows
    ]


def _hit_for(store: LcmStore, kind: str, item_id: int, score: float) -> Hit | None:
    """Materialize one result (only for results that will be returned)."""
    if kind == "message":
        m = store.message(item_id)
        if m is None:
            return None
        row = (m.id, m.session_id, m.role, m.seq, m.created_at, (m.content or "")[:300])
        return _message_hit(store, row, score)
    s = store.summary(item_id)
    if s is None:
        return None
    return Hit(
        s.ref, "summary", s.session_id, s.content[:300], created_at=s.created_at, score=score
    )


def _vector_ranking(
    store: LcmStore,
    embedder: Embedder,
    query: str,
    session_id: str | None,
    limit: int,
    index: VectorIndex | None,
) -> list[tuple[str, int, float]]:
    vector = embedder.embed_query(query)
    return (index or VectorIndex()).search(store, embedder.model, vector, session_id, limit)


def _fts_ranking(
    store: LcmStore, query: str, session_id: str | None, limit: int, summaries: bool = True
) -> list[tuple[str, int, float]]:
    """Ids and ranks only, best first: FTS5's ``ORDER BY rank`` path, no snippets."""
    ranked: list[tuple[str, int, float]] = []
    conn = store.searchable()
    tables = [("message", "messages_fts", "messages")]
    if summaries:
        tables.append(("summary", "summaries_fts", "summaries"))
    for kind, table, base in tables:
        if session_id is None:
            sql = (
                f"SELECT rowid, rank FROM {ATTACHED_AS}.{table} WHERE {table} MATCH ? "
                "ORDER BY rank LIMIT ?"
            )
            params: list[Any] = [query, limit]
        else:
            sql = (
                f"SELECT f.rowid, f.rank FROM {ATTACHED_AS}.{table} f "
                f"JOIN {base} b ON b.id = f.rowid "
                f"WHERE {table} MATCH ? AND b.session_id = ? ORDER BY f.rank LIMIT ?"
            )
            params = [query, session_id, limit]
        ranked += [(kind, int(r[0]), -float(r[1])) for r in fetch_all(conn, sql, params)]
    return sorted(ranked, key=lambda r: -r[2])[:limit]


def vector_search(
    store: LcmStore,
    embedder: Embedder,
    query: str,
    session_id: str | None,
    limit: int,
    index: VectorIndex | None = None,
) -> list[Hit]:
    """Nearest items by cosine similarity, only among vectors of the embedder's model."""
    found = _vector_ranking(store, embedder, query, session_id, limit, index)
    return [h for k, i, score in found if (h := _hit_for(store, k, i, score)) is not None]


def hybrid_search(
    store: LcmStore,
    embedder: Embedder | None,
    query: str,
    session_id: str | None = None,
    limit: int = 10,
    mode: str = "hybrid",
    index: VectorIndex | None = None,
    fusion: Fusion = DEFAULT_FUSION,
) -> list[Hit]:
    """Reciprocal rank fusion of full-text (any term) and vector rankings, copies folded.

    Each ranking reads ``OVERSAMPLE`` candidates per slot and keeps the first
    of each content, so a message repeated twenty times takes one slot, not
    twenty. Rankings carry ids only; rows, snippets and ``covered_by`` are
    fetched for the ``limit`` results returned, not for every candidate.
    """
    depth = max(limit * 3, fusion.depth)
    pool = depth * OVERSAMPLE
    rankings: list[tuple[float, list[tuple[str, int, float]]]] = []
    if mode in ("hybrid", "fts"):
        fts = _selective_or_query(store, query, fusion)
        if fts:
            ranking = _fts_ranking(store, fts, session_id, pool, fusion.summaries)
            rankings.append((fusion.fts_weight, ranking))
    if mode in ("hybrid", "vector") and embedder is not None:
        vector = _vector_ranking(store, embedder, query, session_id, pool, index)
        weight = fusion.vector_weight
        rankings.append((embedder.rank_weight if weight is None else weight, vector))
    if not fusion.summaries:
        rankings = [(w, [r for r in ranking if r[0] == "message"]) for w, ranking in rankings]
    copies = _copies(store, [item for _, ranking in rankings for item in ranking])
    distinct = [(w, _first_copies(ranking, copies)[:depth]) for w, ranking in rankings]
    scores = _fused(distinct, fusion.rrf_k)
    ordered = sorted(scores, key=lambda key: -scores[key])
    hits: list[Hit] = []
    for kind, item_id in ordered:
        hit = _hit_for(store, kind, item_id, round(scores[(kind, item_id)], 6))
        if hit is not None:
            same = copies.get((kind, item_id), [(kind, item_id)])
            hit.count = len(same)
            hit.ids = [_ref(k, i) for k, i in same[:MAX_IDS]]
            hits.append(hit)
        if len(hits) == limit:
            break
    return hits


def _ref(kind: str, item_id: int) -> str:
    return f"{MESSAGE_PREFIX if kind == 'message' else SUMMARY_PREFIX}{item_id}"


def _copies(
    store: LcmStore, ranked: list[tuple[str, int, float]]
) -> dict[tuple[str, int], list[tuple[str, int]]]:
    """Each candidate's copies among all candidates (same content), first-seen order.

    Every copy maps to the same list, whose first item stands for the group.
    """
    order = list(dict.fromkeys((kind, item_id) for kind, item_id, _ in ranked))
    keys = _content_keys(store, order)
    groups: dict[bytes, list[tuple[str, int]]] = {}
    for item in order:
        groups.setdefault(keys.get(item, item[0].encode() + str(item[1]).encode()), []).append(item)
    return {item: group for group in groups.values() for item in group}


def _content_keys(store: LcmStore, items: list[tuple[str, int]]) -> dict[tuple[str, int], bytes]:
    """``content_key`` of many messages and summaries, a few IN queries in all."""
    keys: dict[tuple[str, int], bytes] = {}
    for kind, sql in (
        ("message", "SELECT id, role, coalesce(content, content_json) FROM messages"),
        ("summary", "SELECT id, 'summary', content FROM summaries"),
    ):
        ids = [item_id for k, item_id in items if k == kind]
        for start in range(0, len(ids), 500):
            chunk = ids[start : start + 500]
            marks = ",".join("?" * len(chunk))
            for item_id, role, text in fetch_all(store.conn, f"{sql} WHERE id IN ({marks})", chunk):
                keys[(kind, int(item_id))] = content_key(role, text)
    return keys


def _first_copies(
    ranking: list[tuple[str, int, float]],
    copies: dict[tuple[str, int], list[tuple[str, int]]],
) -> list[tuple[str, int, float]]:
    """The ranking with one entry per content, named by its group's representative."""
    seen: set[tuple[str, int]] = set()
    distinct = []
    for kind, item_id, score in ranking:
        head = copies.get((kind, item_id), [(kind, item_id)])[0]
        if head not in seen:
            seen.add(head)
            distinct.append((head[0], head[1], score))
    return distinct


def _fused(
    rankings: list[tuple[float, list[tuple[str, int, float]]]], rrf_k: int
) -> dict[tuple[str, int], float]:
    """Weighted reciprocal rank fusion: no score calibration between rankings needed."""
    scores: dict[tuple[str, int], float] = {}
    for weight, ranking in rankings:
        for rank, (kind, item_id, _score) in enumerate(ranking):
            key = (kind, item_id)
            scores[key] = scores.get(key, 0.0) + weight / (rrf_k + rank + 1)
    return scores


def describe(store: LcmStore, ref: str) -> dict[str, Any]:
    """Metadata of a summary, message or output, without its full content."""
    kind, key = parse_ref(ref)
    if kind == "summary":
        summary = _require(store.summary(int(key)), ref)
        return {
            "id": summary.ref,
            "kind": "summary",
            "session_id": summary.session_id,
            "depth": summary.depth,
            "tokens": summary.token_count,
            "source_tokens": summary.source_tokens,
            "escalation_level": summary.level,
            "seq_range": [summary.first_seq, summary.last_seq],
            "time_range": [summary.start_at, summary.end_at],
            "message_count": summary.message_count,
            "sources": store.summary_source_count(summary.id),
            "content": summary.content,
        }
    if kind == "message":
        message = _require(store.message(int(key)), ref)
        return {
            "id": message.ref,
            "kind": "message",
            "session_id": message.session_id,
            "role": message.role,
            "seq": message.seq,
            "tokens": message.token_count,
            "output_id": message.output_id,
            "covered_by": _covered_by(store, message.id),
        }
    record = _require(store.output(ref), ref)
    return {"id": record.id, "kind": "output", "size": record.size, "encoding": record.encoding}


def expand(store: LcmStore, ref: str, offset: int = 0, limit: int = 50) -> dict[str, Any]:
    """A summary's sources (paginated), a message in full, or an output in full."""
    kind, key = parse_ref(ref)
    if kind == "summary":
        summary = _require(store.summary(int(key)), ref)
        total = store.summary_source_count(summary.id)
        sources = store.summary_sources(summary.id, max(0, offset), max(1, min(limit, 500)))
        return {
            "id": summary.ref,
            "kind": "summary",
            "total_sources": total,
            "offset": offset,
            "next_offset": offset + len(sources) if offset + len(sources) < total else None,
            "sources": [_source_payload(store, s) for s in sources],
        }
    if kind == "message":
        message = _require(store.message(int(key)), ref)
        return {"id": message.ref, "kind": "message", "message": store.full_message(message)}
    record = _require(store.output(ref), ref)
    content = out.decode_content(store.output_bytes(record), record.encoding)
    return {"id": record.id, "kind": "output", "content": content}


def read_output(store: LcmStore, ref: str, offset: int = 0, limit: int = 8000) -> dict[str, Any]:
    """A character range of an externalized output, for outputs too big to expand at once."""
    record = _require(store.output(ref), ref)
    text = store.output_bytes(record).decode("utf-8")
    offset = max(0, offset)
    chunk = text[offset : offset + max(1, min(limit, 100_000))]
    end = offset + len(chunk)
    return {
        "id": record.id,
        "total_chars": len(text),
        "offset": offset,
        "next_offset": end if end < len(text) else None,
        "content": chunk,
    }


def _source_payload(store: LcmStore, item: StoredMessage | Summary) -> dict[str, Any]:
    if isinstance(item, Summary):
        return {
            "id": item.ref,
            "kind": "summary",
            "depth": item.depth,
            "seq_range": [item.first_seq, item.last_seq],
            "content": item.content,
        }
    payload = {"id": item.ref, "kind": "message", "seq": item.seq, **item.to_openai()}
    if item.output_id:
        payload["output_id"] = item.output_id
    return payload


def parse_ref(ref: str) -> tuple[str, str]:
    ref = str(ref).strip()
    for prefix, kind in (
        (SUMMARY_PREFIX, "summary"),
        (MESSAGE_PREFIX, "message"),
        (OUTPUT_PREFIX, "output"),
    ):
        if ref.startswith(prefix) and len(ref) > len(prefix):
            key = ref[len(prefix) :]
            if kind != "output" and not key.isdigit():
                break
            return kind, key
    raise RuntimeFailure(
        f"LCM id {ref!r} is not a summary (sum_N), message (msg_N) or output (out_HEX) id"
    )


def _require(value: Any, ref: str) -> Any:
    if value is None:
        raise RuntimeFailure(f"LCM id {ref} does not exist in this database")
    return value


RECENT_SCAN_ROWS = 50_000  # newest messages read to find the most recently active sessions


def recent_activity(
    store: LcmStore, limit: int = 10, exclude: str | None = None
) -> list[dict[str, Any]]:
    """The sessions active most recently, newest first: size, span and last user words.

    Walks the newest messages backwards (rowid order, no scan of the history)
    until ``limit`` distinct sessions are found or ``RECENT_SCAN_ROWS`` were read.
    """
    limit = max(1, min(limit, 50))
    found: list[str] = []
    cursor = store.conn.execute(
        "SELECT session_id FROM messages ORDER BY id DESC LIMIT ?", (RECENT_SCAN_ROWS,)
    )
    for (session_id,) in cursor:
        if session_id != exclude and session_id not in found:
            found.append(str(session_id))
            if len(found) == limit:
                break
    return [_session_activity(store, session_id) for session_id in found]


def _session_activity(store: LcmStore, session_id: str) -> dict[str, Any]:
    span = fetch_one(
        store.conn,
        "SELECT (SELECT created_at FROM messages WHERE session_id = ?1 ORDER BY seq LIMIT 1), "
        "(SELECT created_at FROM messages WHERE session_id = ?1 ORDER BY seq DESC LIMIT 1), "
        "(SELECT next_seq - 1 FROM sessions WHERE id = ?1), "
        "(SELECT count(*) FROM summaries WHERE session_id = ?1)",
        (session_id,),
    )
    last_user = fetch_one(
        store.conn,
        "SELECT id, substr(coalesce(content, content_json), 1, 300) FROM messages "
        "WHERE session_id = ? AND role = 'user' ORDER BY seq DESC LIMIT 1",
        (session_id,),
    )
    first_at, last_at, messages, summaries = span or (None, None, 0, 0)
    return {
        "session_id": session_id,
        "messages": messages,
        "summaries": summaries,
        "first_at": first_at,
        "last_at": last_at,
        "last_user_message": (
            {"id": f"{MESSAGE_PREFIX}{last_user[0]}", "text": last_user[1]} if last_user else None
        ),
    }


def summary_tree(
    store: LcmStore, ref: str | None, session_id: str | None, max_depth: int = 2
) -> dict[str, Any]:
    """The summary DAG: a summary's children (to ``max_depth`` levels), or a session's roots.

    Without ``ref``: the summaries in the session's live context, each with
    its children. Ids, depths, spans and sizes only; ``lcm_expand`` reads
    contents.
    """
    max_depth = max(0, min(max_depth, 5))
    if ref:
        kind, key = parse_ref(ref)
        if kind != "summary":
            raise RuntimeFailure(f"LCM id {ref}: the summary DAG starts at a summary (sum_N)")
        root = _require(store.summary(int(key)), ref)
        return _tree_node(store, root, max_depth)
    if not session_id or not store.has_session(session_id):
        raise RuntimeFailure(f"LCM session {session_id!r} has no stored messages")
    items = store.context_items(session_id)
    roots = [item.summary for item in items if item.summary is not None]
    return {
        "session_id": session_id,
        "context_items": len(items),
        "raw_messages_in_context": sum(1 for item in items if item.message is not None),
        "summaries": [_tree_node(store, s, max_depth) for s in roots],
    }


def _tree_node(store: LcmStore, summary: Summary, depth_left: int) -> dict[str, Any]:
    node: dict[str, Any] = {
        "id": summary.ref,
        "depth": summary.depth,
        "seq_range": [summary.first_seq, summary.last_seq],
        "message_count": summary.message_count,
        "tokens": summary.token_count,
        "sources": store.summary_source_count(summary.id),
    }
    if depth_left > 0 and summary.depth > 0:
        children = [s for s in store.summary_sources(summary.id, 0, 100) if isinstance(s, Summary)]
        node["children"] = [_tree_node(store, child, depth_left - 1) for child in children]
    return node
