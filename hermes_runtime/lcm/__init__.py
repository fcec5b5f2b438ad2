"""Lossless Context Management: keep every message, fold old turns into expandable summaries.

Public surface: ``LcmConfig``, ``LcmEngine`` (host-agnostic engine),
``LcmStore`` (the database), ``CompactionPolicy``, ``make_summarizer``,
``validation_errors`` (is a message list valid for OpenAI APIs), and the
operator's calls the CLI forwards to: ``open_readonly``, ``import_history``,
``context_within``, ``grep``, ``search_history``, ``expand``, ``stats``,
``doctor``, ``rebuild_fts``, ``remove_orphan_outputs``. The Hermes
integration lives in ``hermes_runtime.lcm.hermes_plugin`` (imported only by
Hermes, since it needs Hermes' ``agent`` package).
"""

from hermes_runtime.lcm.assembly import validation_errors
from hermes_runtime.lcm.compaction import CompactionPolicy, CompactionReport
from hermes_runtime.lcm.config import LcmConfig
from hermes_runtime.lcm.doctor import doctor, rebuild_fts, remove_orphan_outputs, stats
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
from hermes_runtime.lcm.schema import NewerLcmSchema, NotAnLcmDatabase
from hermes_runtime.lcm.store import LcmStore

__all__ = [
    "CompactionPolicy",
    "CompactionReport",
    "ImportResult",
    "LcmConfig",
    "LcmEngine",
    "LcmStore",
    "NewerLcmSchema",
    "NotAnLcmDatabase",
    "SearchResult",
    "context_within",
    "doctor",
    "expand",
    "grep",
    "import_history",
    "make_summarizer",
    "open_readonly",
    "rebuild_fts",
    "remove_orphan_outputs",
    "search_history",
    "stats",
    "validation_errors",
]
