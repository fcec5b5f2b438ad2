"""Search results (``Hit``) and the folding of identical contents into one result.

Why a module of its own: grep and hybrid search rank differently but return
the same records and fold copies the same way, by ``content_key``. Identical
contents fold into one hit (``count``, ``ids``): a fact repeated twenty
times (a transcript imported again, a tool output fetched over and over)
otherwise fills the whole result list with copies of one message and
pushes every other match out.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from typing import Any

from hermes_runtime.lcm.records import MESSAGE_PREFIX, SUMMARY_PREFIX
from hermes_runtime.lcm.search import searchreads
from hermes_runtime.lcm.store import dag, messagereads
from hermes_runtime.lcm.store.lcmstore import LcmStore

# Rankings read ``OVERSAMPLE`` times the number of results asked for; grep
# reads ``FIRST_READ`` times first (each candidate row is a random read of
# the messages table, cold on a large database), then four times more at
# each pass while copies keep crowding, up to ``MAX_CANDIDATES``.
OVERSAMPLE = 20
FIRST_READ = 2
MAX_CANDIDATES = 20_000
MAX_IDS = 50
SNIPPET_CHARS = 300  # of a result's text, where no full-text snippet is cut


@dataclass
class Hit:
    """One result: a message or summary, its place, and its copies among the candidates."""

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


# A candidate before it becomes a Hit: (content key, ref, build the Hit).
Candidate = tuple[bytes, str, Callable[[], Hit]]


def content_key(role: str | None, text: str | None) -> bytes:
    """What makes two items the same result: role and exact text."""
    data = f"{role or ''}\x00{text or ''}".encode()
    return hashlib.blake2b(data, digest_size=16).digest()


def ref(kind: str, item_id: int) -> str:
    """``msg_N`` or ``sum_N``."""
    return f"{MESSAGE_PREFIX if kind == 'message' else SUMMARY_PREFIX}{item_id}"


def message_hit(store: LcmStore, row: tuple[Any, ...], score: float) -> Hit:
    """A message's hit from (id, session, role, seq, created_at, snippet)."""
    message_id, session_id, role, seq, created_at, snippet = row
    return Hit(
        id=ref("message", message_id),
        kind="message",
        session_id=session_id,
        snippet=snippet,
        role=role,
        seq=seq,
        created_at=created_at,
        covered_by=searchreads.covered_by(store, message_id),
        score=score,
    )


def summary_hit(
    summary_id: int, session_id: str, snippet: str, created_at: float | None, score: float
) -> Hit:
    return Hit(
        ref("summary", summary_id),
        "summary",
        session_id,
        snippet,
        created_at=created_at,
        score=score,
    )


def hit_for(store: LcmStore, kind: str, item_id: int, score: float) -> Hit | None:
    """Materialize one result (only for results that will be returned)."""
    if kind == "message":
        m = messagereads.message(store, item_id)
        if m is None:
            return None
        row = (m.id, m.session_id, m.role, m.seq, m.created_at, (m.content or "")[:SNIPPET_CHARS])
        return message_hit(store, row, score)
    s = dag.summary(store, item_id)
    if s is None:
        return None
    return summary_hit(s.id, s.session_id, s.content[:SNIPPET_CHARS], s.created_at, score)


def fold_copies(candidates: Iterable[Candidate], limit: int) -> tuple[list[Hit], bool]:
    """The first ``limit`` distinct results, each carrying its copies; and whether more exist.

    Copies of one content rank together (same text, same score), so once a
    later distinct result was seen, every earlier group is complete.
    """
    groups: dict[bytes, Hit] = {}
    for key, item_ref, build in candidates:
        hit = groups.get(key)
        if hit is None:
            if len(groups) == limit:
                return list(groups.values()), True
            hit = groups[key] = build()
            hit.ids = [item_ref]
            continue
        hit.count += 1
        if len(hit.ids) < MAX_IDS:
            hit.ids.append(item_ref)
    return list(groups.values()), False


def distinct(fetch: Callable[[int], list[Candidate]], limit: int) -> list[Hit]:
    """Best-first distinct results, reading more candidates while copies crowd them out."""
    wanted = max(limit * FIRST_READ, 50)
    while True:
        candidates = fetch(wanted)
        hits, complete = fold_copies(candidates, limit)
        if complete or len(candidates) < wanted or wanted >= MAX_CANDIDATES:
            return hits
        wanted = min(wanted * 4, MAX_CANDIDATES)
