"""Folding old context into summaries, and assembling the context a model reads.

``compaction.compact`` folds a session's oldest context until it fits a
budget, with ``summarize``'s summarizers and ``policy``'s knobs; ``compactrun.Compactions`` runs it
for an engine (one session at a time, measured, fitted); ``assembly`` turns
context items into a valid OpenAI message list; ``outage`` defers a
compaction while the summary model fails.
"""
