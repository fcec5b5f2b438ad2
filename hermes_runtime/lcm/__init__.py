"""Lossless Context Management: keep every message, fold old turns into expandable summaries.

Public surface: ``LcmConfig``, ``LcmEngine`` (host-agnostic engine),
``LcmStore`` (the database), ``CompactionPolicy``, ``make_summarizer``,
``validation_errors`` (is a message list valid for OpenAI APIs). The Hermes
integration lives in ``hermes_runtime.lcm.hermes_plugin`` (imported only by
Hermes, since it needs Hermes' ``agent`` package).
"""

from hermes_runtime.lcm.assembly import validation_errors
from hermes_runtime.lcm.compaction import CompactionPolicy, CompactionReport
from hermes_runtime.lcm.config import LcmConfig
from hermes_runtime.lcm.engine import LcmEngine, make_summarizer
from hermes_runtime.lcm.store import LcmStore

__all__ = [
    "CompactionPolicy",
    "CompactionReport",
    "LcmConfig",
    "LcmEngine",
    "LcmStore",
    "make_summarizer",
    "validation_errors",
]
