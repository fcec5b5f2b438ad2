"""How history is read back: grep, hybrid search, and navigation from an id.

``textsearch.grep`` (full-text or regex), ``hybrid.hybrid_search`` (full-text
and vector rankings fused), ``navigate`` (``describe``, ``expand``,
``read_output``, ``summary_tree``, ``recent_activity``); ``hits`` holds the
result record, ``ftsquery`` turns user text into FTS5 terms that cannot
inject FTS5 syntax, and ``searchreads`` holds the SQL all of them run.
"""
