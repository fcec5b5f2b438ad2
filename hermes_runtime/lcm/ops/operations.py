"""What an operator does with an LCM database, as library calls the CLI only forwards to.

Why here and not in the CLI: which verbs may write, when the schema may be
created, and how much embedding a search may do are LCM's decisions. Read
verbs open the database read-only and refuse any file without the LCM
schema (``LcmStore(readonly=True)``); only ``import_history`` (and the
engine the agent runs) may create the schema, and only in a new file.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from hermes_runtime.common.errors import RuntimeFailure
from hermes_runtime.lcm.compact.summarize import Summarizer
from hermes_runtime.lcm.config import LcmConfig
from hermes_runtime.lcm.embed.embedbatch import embed_queued_in_memory
from hermes_runtime.lcm.embed.embedders import make_embedder
from hermes_runtime.lcm.embed.vectorindex import VectorIndex
from hermes_runtime.lcm.engine.lcmengine import LcmEngine
from hermes_runtime.lcm.ops.importer import import_hermes_state, import_messages, read_jsonl
from hermes_runtime.lcm.search.hits import Hit
from hermes_runtime.lcm.search.hybrid import hybrid_search
from hermes_runtime.lcm.store.lcmstore import LcmStore


def open_readonly(db_path: Path, outputs_dir: Path | None = None) -> LcmStore:
    """An existing LCM database, read-only: a foreign or newer file is refused, untouched."""
    return LcmStore(db_path, outputs_dir, readonly=True)


@dataclass
class ImportResult:
    """What ``import_history`` stored and how far each session was compacted."""

    sessions: list[str] = field(default_factory=list)
    skipped_sessions: list[str] = field(default_factory=list)
    messages: int = 0
    summaries_created: int = 0
    context_tokens: dict[str, int] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def import_history(
    config: LcmConfig,
    budget: int,
    *,
    jsonl: Path | None = None,
    session: str | None = None,
    hermes_state: Path | None = None,
    prefix: str = "",
    before: float | None = None,
    summarizer: Summarizer | None = None,
) -> ImportResult:
    """Import a JSONL file into ``session`` or every session of Hermes' state.db, then compact.

    The JSONL file is checked line by line before the database is opened, so
    a bad file leaves no database behind. Each imported session is then
    compacted to ``budget`` tokens.
    """
    if (jsonl is None) == (hermes_state is None):
        raise RuntimeFailure("lcm import: give either FILE (with --session) or --hermes-state")
    if jsonl is not None and not session:
        raise RuntimeFailure("lcm import: --session is required with FILE")
    messages = read_jsonl(jsonl) if jsonl is not None else []
    engine = LcmEngine(config, summarizer=summarizer)
    result = ImportResult()
    try:
        if jsonl is not None and session:
            result.sessions = [session]
            result.messages = import_messages(engine, session, messages)
        elif hermes_state is not None:
            report = import_hermes_state(engine, hermes_state, prefix=prefix, before=before)
            result.sessions, result.messages = report.sessions, report.messages
            result.skipped_sessions = report.skipped_sessions
        for name in result.sessions:
            compaction = engine.compactions.compact(name, budget)
            result.summaries_created += len(compaction.summaries_created)
            result.context_tokens[name] = compaction.tokens_after
    finally:
        engine.close()
    return result


@dataclass
class SearchResult:
    hits: list[Hit]
    pending_embeddings: int  # queued items with no stored vector (vector ranking is partial)


def search_history(
    store: LcmStore,
    query: str,
    session_id: str | None = None,
    limit: int = 10,
    mode: str = "hybrid",
    embed_pending: int = 256,
    config: LcmConfig | None = None,
    model_cache: Path | None = None,
) -> SearchResult:
    """Hybrid search of a read-only database, embedding at most ``embed_pending`` queued items.
    ``model_cache``: where e5's graph is kept, from the calling process's settings.

    Bounded: with e5 a fresh import can queue hours of embedding work, and an
    operator's search must answer now. Those items are embedded in memory for
    this search only; the agent's worker stores vectors.
    """
    embedder = None
    if mode != "fts":
        embedder = make_embedder(
            config or LcmConfig(db_path=store.db_path, outputs_dir=store.outputs_dir),
            model_cache,
        )
    index = VectorIndex()
    pending = 0
    if embedder is not None:
        pending = store.counts()["embed_queue"]
        pending -= embed_queued_in_memory(store, embedder, index, embed_pending)
    hits = hybrid_search(store, embedder, query, session_id, limit, mode, index=index)
    return SearchResult(hits, max(0, pending))
