"""Background embeddings and Prometheus figures."""

from __future__ import annotations

import threading
import time
from pathlib import Path

from prometheus_client import REGISTRY
from support.lcm_conversations import simple_conversation

from hermes_runtime.lcm.config import LcmConfig
from hermes_runtime.lcm.engine.lcmengine import LcmEngine


def sample(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels or None) or 0.0


def test_worker_embeds_without_blocking_ingest(tmp_path: Path) -> None:
    engine = LcmEngine(LcmConfig.for_home(tmp_path), start_worker=True)
    engine.start_background()
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
    engine.compactions.compact("s", 600)
    engine.handle_tool("lcm_grep", {"query": "topic1"}, "s")
    assert sample("lcm_messages_ingested_total") == ingested + len(messages)
    assert sample("lcm_compaction_seconds_count") == compactions + 1
    assert sample("lcm_retrieval_seconds_count", tool="lcm_grep") == grep_calls + 1
    assert sample("lcm_summaries_total", level="3") >= 1
    assert sample("lcm_database_bytes") > 0


def test_plugin_serves_metrics_when_asked(tmp_path: Path) -> None:
    import socket
    import urllib.request

    from hermes_runtime.lcm.host.hermes_plugin import LcmContextEngine
    from hermes_runtime.lcm.host.hostsettings import METRICS_PORT_ENV, PluginHostSettings

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    settings = PluginHostSettings.from_environ({METRICS_PORT_ENV: str(port)})
    config = LcmConfig.for_home(tmp_path, {"embeddings": "off"})
    engine = LcmContextEngine(config, settings=settings)
    engine.update_model("m", 100_000)
    engine.on_session_start("s")
    engine.compress([{"role": "user", "content": "count me"}])
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        body = response.read().decode()
    assert "lcm_messages_ingested_total" in body and "lcm_compaction_seconds" in body


def test_the_engine_starts_its_threads_in_start_background_not_in_its_constructor(
    tmp_path: Path,
) -> None:
    """A long-lived engine (``start_worker``) builds its worker; ``start_background`` runs it."""
    before = set(threading.enumerate())
    engine = LcmEngine(LcmConfig.for_home(tmp_path), start_worker=True)
    try:
        assert set(threading.enumerate()) - before == set()
        assert engine.worker is not None
        engine.start_background()
        started = {t.name for t in set(threading.enumerate()) - before}
        assert {"lcm-checkpoint", "lcm-fulltext", "lcm-embeddings"} <= started
    finally:
        engine.close()
