"""doctor finds what breaks in practice: a stale FTS index, missing or orphan outputs."""

from __future__ import annotations

import apsw
from support.lcm_conversations import simple_conversation

from hermes_runtime.lcm.engine.lcmengine import LcmEngine
from hermes_runtime.lcm.ops.doctor import doctor, rebuild_fts, stats
from hermes_runtime.lcm.store import messagereads


def test_healthy_database_passes_both_tiers(engine: LcmEngine) -> None:
    engine.ingest("s", simple_conversation(10))
    engine.compactions.compact("s", 300)
    assert doctor(engine.store).ok
    full = doctor(engine.store, full=True)
    assert full.ok and full.checks["integrity_check"] == ["ok"]
    assert stats(engine.store)["messages"] == engine.store.counts()["messages"]


def test_stale_fts_is_reported_and_rebuilt(engine: LcmEngine) -> None:
    engine.ingest("s", simple_conversation(5))
    damage = apsw.Connection(str(engine.store.fulltext_path))  # the index file, lcm-fts.db
    damage.execute("DELETE FROM messages_fts_docsize WHERE id = 1")
    damage.close()
    report = doctor(engine.store)
    assert not report.ok and any("messages_fts" in p for p in report.problems)
    rows = engine.store.counts()["messages"]
    assert report.checks["messages_fts"] == f"indexed ({rows - 1}, {rows}), stored ({rows}, {rows})"
    rebuild_fts(engine.store)
    assert doctor(engine.store).ok


def test_missing_and_orphan_outputs(engine: LcmEngine) -> None:
    stored = engine.store.ingest("s", {"role": "tool", "tool_call_id": "c", "content": "z" * 9_000})
    record = messagereads.output(engine.store, str(stored.output_id))
    assert record is not None
    (engine.store.outputs_dir / record.relpath).unlink()
    orphan = engine.store.outputs_dir / "ab" / ("ab" + "0" * 62)
    orphan.parent.mkdir(parents=True, exist_ok=True)
    orphan.write_text("left by a crash")
    report = doctor(engine.store)
    assert report.checks["missing_outputs"] == [record.id]
    assert report.checks["orphan_outputs"] == [f"ab/{orphan.name}"]
    assert not report.ok


def test_stats_and_metrics_show_retention_and_growth_per_day(engine: LcmEngine) -> None:
    from prometheus_client import REGISTRY

    from hermes_runtime.lcm.store.retention import retention

    now = 1_800_000_000.0
    day = 86_400.0
    store = engine.store
    store.ingest_many("old", [{"role": "user", "content": "x"}] * 10, created_at=now - 30 * day)
    store.ingest_many("week", [{"role": "user", "content": "y"}] * 20, created_at=now - 3 * day)
    store.ingest_many("today", [{"role": "user", "content": "z"}] * 5, created_at=now - 60)
    figures = retention(store, now=now)
    assert figures["oldest_message_at"] == now - 30 * day
    assert figures["history_days"] == 30.0
    assert figures["messages_last_7_days"] == 25
    assert figures["messages_per_day"] == round(25 / 7, 1)
    per_message = figures["database_bytes"] / 35
    assert figures["bytes_per_message"] == round(per_message)
    assert figures["growth_bytes_per_day"] == round(25 / 7 * per_message)
    assert REGISTRY.get_sample_value("lcm_messages_stored") == 35
    assert REGISTRY.get_sample_value("lcm_oldest_message_timestamp_seconds") == now - 30 * day
    assert REGISTRY.get_sample_value("lcm_growth_bytes_per_day") == figures["growth_bytes_per_day"]
    listed = stats(store)
    assert {"history_days", "growth_bytes_per_day", "messages_per_day"} <= set(listed)


def test_compactions_refresh_the_retention_gauges_at_most_every_few_seconds(
    engine: LcmEngine,
) -> None:
    """A dozen lookups a compaction is 2% of a compress(); the gauges are scraped, not read
    a turn. ``lcm stats`` reads them fresh."""
    from prometheus_client import REGISTRY

    def stored() -> float | None:
        return REGISTRY.get_sample_value("lcm_messages_stored")

    conversation = simple_conversation(40)
    engine.ingest("s", conversation[:60])
    engine.compactions.compact("s", 600, force=True)
    assert stored() == 60
    engine.ingest("s", conversation[60:])
    engine.compactions.compact("s", 600, force=True)
    assert stored() == 60  # refreshed less than RETENTION_REFRESH_SECONDS ago
    assert stats(engine.store)["messages"] == len(conversation) > 60
    assert stored() == len(conversation)


def test_stats_of_an_empty_database(engine: LcmEngine) -> None:
    listed = stats(engine.store)
    assert listed["messages"] == 0 and listed["oldest_message_at"] is None
