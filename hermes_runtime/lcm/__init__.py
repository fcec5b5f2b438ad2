"""Lossless Context Management: keep every message, fold old turns into expandable summaries.

Public surface: ``LcmConfig`` (and ``selected_config``: whether config.yaml picks
LCM, with what settings), ``LcmEngine`` (host-agnostic engine), ``LcmStore`` (the
database), ``CompactionPolicy``, ``make_summarizer``,
``validation_errors`` (is a message list valid for OpenAI APIs), and the
operator's calls the CLI forwards to: ``open_readonly``, ``import_history``,
``context_within``, ``grep``, ``search_history``, ``expand``, ``stats``,
``doctor``, ``rebuild_fts``, ``remove_orphan_outputs``, and embedding now
(``embed_database``, ``lcm embed``) with its state (``embedding_backlog``,
``embedding_status``) and the offline models (``offline_embedder``). The Hermes
integration lives in ``hermes_runtime.lcm.hermes_plugin`` (imported only by
Hermes, since it needs Hermes' ``agent`` package).
"""

from hermes_runtime.lcm.assembly import validation_errors
from hermes_runtime.lcm.compaction import CompactionPolicy, CompactionReport
from hermes_runtime.lcm.config import LcmConfig, selected_config
from hermes_runtime.lcm.doctor import doctor, rebuild_fts, remove_orphan_outputs, stats
from hermes_runtime.lcm.embeddings import offline_embedder
from hermes_runtime.lcm.embedjob import EmbedProgress, EmbedResult, embed_database, embedding_status
from hermes_runtime.lcm.embedstatus import EmbeddingStatus, embedding_backlog
from hermes_runtime.lcm.engine import LcmEngine, make_summarizer
from hermes_runtime.lcm.operations import (
    ImportResult,
    SearchResult,
    context_within,
    import_history,
    open_readonly,
    search_history,
)
from hermes_runtime.lcm.retrieval import expand, grep
from hermes_runtime.lcm.schema import LcmVolumeRefused, NewerLcmSchema, NotAnLcmDatabase
from hermes_runtime.lcm.store import LcmStore

__all__ = [
    "CompactionPolicy",
    "CompactionReport",
    "EmbedProgress",
    "EmbedResult",
    "EmbeddingStatus",
    "ImportResult",
    "LcmConfig",
    "LcmEngine",
    "LcmStore",
    "LcmVolumeRefused",
    "NewerLcmSchema",
    "NotAnLcmDatabase",
    "SearchResult",
    "context_within",
    "doctor",
    "embed_database",
    "embedding_backlog",
    "embedding_status",
    "expand",
    "grep",
    "import_history",
    "make_summarizer",
    "offline_embedder",
    "open_readonly",
    "rebuild_fts",
    "remove_orphan_outputs",
    "search_history",
    "selected_config",
    "stats",
    "validation_errors",
]
