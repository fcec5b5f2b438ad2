"""doctor finds what breaks in practice: a stale FTS index, missing or orphan outputs."""

from __future__ import annotations

from support.lcm_conversations import simple_conversation

from hermes_runtime.lcm import LcmEngine
from hermes_runtime.lcm.doctor import doctor, rebuild_fts, stats


def test_healthy_database_passes_both_tiers(engine: LcmEngine) -> None:
    engine.ingest("s", simple_conversation(10))
    engine.compact("s", 300)
    assert doctor(engine.store).ok
    full = doctor(engine.store, full=True)
    assert full.ok and full.checks["integrity_check"] == ["ok"]
    assert stats(engine.store)["messages"] == engine.store.counts()["messages"]


def test_stale_fts_is_reported_and_rebuilt(engine: LcmEngine) -> None:
    engine.ingest("s", simple_conversation(5))
    engine.store.conn.execute("DELETE FROM messages_fts_docsize WHERE id = 1")
    report = doctor(engine.store)
    assert not report.ok and any("messages_fts" in p for p in report.problems)
    rebuild_fts(engine.store)
    assert doctor(engine.store).ok


def test_missing_and_orphan_outputs(engine: LcmEngine) -> None:
    stored = engine.store.ingest("s", {"role": "tool", "tool_call_id": "c", "content": "z" * 9_000})
    record = engine.store.output(str(stored.output_id))
    assert record is not None
    (engine.store.outputs_dir / record.relpath).unlink()
    orphan = engine.store.outputs_dir / "ab" / ("ab" + "0" * 62)
    orphan.parent.mkdir(parents=True, exist_ok=True)
    orphan.write_text("left by a crash")
    report = doctor(engine.store)
    assert report.checks["missing_outputs"] == [record.id]
    assert report.checks["orphan_outputs"] == [f"ab/{orphan.name}"]
    assert not report.ok
