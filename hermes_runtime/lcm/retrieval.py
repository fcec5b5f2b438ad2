"""How the agent gets history back: grep, hybrid search, describe, expand, read an output.

The one import for the retrieval tools (the engine's ``lcm_*`` tools, the
CLI's operations, the benchmarks). Each part lives in a module of its own:

- ``ftsquery``: user text to quoted FTS5 terms, so user text can never
  inject FTS syntax (a stray ``"`` or ``NEAR(`` is just a word);
- ``hits``: the ``Hit`` record and the folding of identical contents;
- ``textsearch``: ``grep``, full-text or regex, with snippets;
- ``hybrid``: full-text and vector rankings fused by reciprocal rank
  fusion, which needs no score calibration between the two;
- ``navigate``: ``describe``, ``expand``, ``read_output``, ``summary_tree``,
  ``recent_activity``: from an id to what the agent reads next;
- ``searchreads``: the SQL all of them run.
"""

from __future__ import annotations

from hermes_runtime.lcm.ftsquery import fts_query
from hermes_runtime.lcm.hits import Hit
from hermes_runtime.lcm.hybrid import (
    DEFAULT_FUSION,
    Fusion,
    hybrid_search,
    selective_or_query,
    vector_search,
)
from hermes_runtime.lcm.navigate import (
    describe,
    expand,
    read_output,
    recent_activity,
    summary_tree,
)
from hermes_runtime.lcm.textsearch import grep

__all__ = [
    "DEFAULT_FUSION",
    "Fusion",
    "Hit",
    "describe",
    "expand",
    "fts_query",
    "grep",
    "hybrid_search",
    "read_output",
    "recent_activity",
    "selective_or_query",
    "summary_tree",
    "vector_search",
]
