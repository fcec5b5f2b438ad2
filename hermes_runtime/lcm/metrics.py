"""Prometheus figures for LCM: ingest, compaction, retrieval, database size.

Metric objects are module-level because Prometheus collectors are
process-wide by design (the agent's ``/metrics`` endpoint serves the
default registry); nothing else in LCM keeps global state.
"""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

INGESTED = Counter("lcm_messages_ingested_total", "Messages stored by LCM")
REPLAYED_TURNS = Counter(
    "lcm_replayed_turns_total",
    "User turns a client's retry replayed, stored once (lcm.replay_window_seconds)",
)
# A full (or read-only, or locked) volume: turn writes held in memory until it takes them.
TURN_WRITES_HELD = Gauge(
    "lcm_turn_writes_held",
    "Turn writes held in memory because the volume refused them; written once it has room",
)
STORAGE_FAILURES = Counter(
    "lcm_storage_failures_total",
    "Batches of turn writes the volume refused (full, read-only, locked), held and tried again",
)
EXTERNALIZED = Counter("lcm_outputs_externalized_total", "Message contents moved to outputs/")
INGEST_SECONDS = Histogram(
    "lcm_ingest_seconds",
    "Time to store one batch of messages",
    buckets=(0.0005, 0.001, 0.002, 0.005, 0.01, 0.05, 0.1, 0.5),
)
COMPACTION_SECONDS = Histogram(
    "lcm_compaction_seconds",
    "Duration of one compaction",
    buckets=(0.01, 0.1, 1, 5, 15, 30, 60, 120),
)
COMPACTION_TOKENS_IN = Counter("lcm_compaction_tokens_in_total", "Context tokens before compaction")
COMPACTION_TOKENS_OUT = Counter(
    "lcm_compaction_tokens_out_total", "Context tokens after compaction"
)
SUMMARIES = Counter("lcm_summaries_total", "Summaries created, by escalation level", ["level"])
COMPACTION_ERRORS = Counter("lcm_summarizer_errors_total", "Summarizer failures that escalated")
RETRIEVAL_SECONDS = Histogram(
    "lcm_retrieval_seconds",
    "Latency of retrieval tools",
    ["tool"],
    buckets=(0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5),
)
DATABASE_BYTES = Gauge(
    "lcm_database_bytes", "Size of the LCM database and its full-text index file, each with its WAL"
)
MESSAGES_STORED = Gauge("lcm_messages_stored", "Messages in the LCM database (every session)")
OLDEST_MESSAGE = Gauge(
    "lcm_oldest_message_timestamp_seconds", "When the oldest stored message was written (retention)"
)
GROWTH_BYTES_PER_DAY = Gauge(
    "lcm_growth_bytes_per_day",
    "Database growth over the last 7 days: messages a day times bytes a message",
)
