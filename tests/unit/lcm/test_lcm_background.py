"""Background embeddings and Prometheus figures."""

from __future__ import annotations

import time
from pathlib import Path

from lcm_conversations import simple_conversation
from prometheus_client import REGISTRY

from hermes_runtime.lcm import LcmConfig, LcmEngine


def sample(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels or None) or 0.0


def test_worker_embeds_without_blocking_ingest(tmp_path: Path) -> None:
    engine = LcmEngine(LcmConfig.for_home(tmp_path), start_worker=True)
    try:
        engine.ingest("s", simple_conversation(10))
        deadline = time.monotonic() + 60
        while engine.store.counts()["embed_queue"] and time.monotonic() < deadline:
            time.sleep(0.05)
        counts = engine.store.counts()
        assert counts["embed_queue"] == 0
        assert counts["embeddings"] == counts["messages"]
        assert engine.worker is not None and engine.worker.errors == []
    finally:
        engine.close()


def test_metrics_count_ingest_compaction_and_retrieval(engine: LcmEngine) -> None:
    ingested = sample("lcm_messages_ingested_total")
    compactions = sample("lcm_compaction_seconds_count")
    grep_calls = sample("lcm_retrieval_seconds_count", tool="lcm_grep")
    messages = simple_conversation(30)
    engine.ingest("s", messages)
    engine.compact("s", 600)
    engine.handle_tool("lcm_grep", {"query": "topic1"}, "s")
    assert sample("lcm_messages_ingested_total") == ingested + len(messages)
    assert sample("lcm_compaction_seconds_count") == compactions + 1
    assert sample("lcm_retrieval_seconds_count", tool="lcm_grep") == grep_calls + 1
    assert sample("lcm_summaries_total", level="3") >= 1
    assert sample("lcm_database_bytes") > 0
