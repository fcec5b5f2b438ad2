"""Compaction and the full-text index on a data volume that fills up (issue 30), on a real
size-limited tmpfs: a compaction the volume refuses leaves no half summary and loses no
message; once there is room the next one folds the session and the index finds every turn."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import apsw
import pytest
from support.fullvolume import fill, small_tmpfs
from support.lcm_conversations import SMALL_POLICY as SMALL
from support.lcm_conversations import reconstruct, simple_conversation

from hermes_runtime.lcm.compact.assembly import count_tokens
from hermes_runtime.lcm.config import LcmConfig
from hermes_runtime.lcm.engine.lcmengine import LcmEngine
from hermes_runtime.lcm.search.textsearch import grep
from hermes_runtime.lcm.store import dag


@pytest.fixture
def volume(tmp_path: Path) -> Iterator[Path]:
    with small_tmpfs(tmp_path / "volume", mib=4) as mounted:
        yield mounted


def engine_on(volume: Path) -> LcmEngine:
    config = LcmConfig.for_home(volume, {"embeddings": "off"})
    return LcmEngine(LcmConfig(**{**config.__dict__, "policy": SMALL}))


def summaries(engine: LcmEngine) -> int:
    return int(engine.store.conn.execute("SELECT count(*) FROM summaries").fetchall()[0][0])


def test_a_compaction_on_a_full_volume_leaves_no_half_summary_and_runs_once_there_is_room(
    volume: Path,
) -> None:
    engine = engine_on(volume)
    messages = simple_conversation(40)
    engine.ingest("s", messages)
    fill(volume)
    # What the caller (Hermes' compress()) gets: SQLite's error, at once, not a hang; the
    # summaries' transaction is rolled back whole and every message stays in the context.
    with pytest.raises(apsw.FullError):
        engine.compactions.fitted_context("s", 1_500)
    assert summaries(engine) == 0
    assert reconstruct(engine.store, engine.context("s")) == messages
    (volume / "ballast.bin").unlink()

    context, report = engine.compactions.fitted_context("s", 1_500)
    assert report.summaries_created
    assert count_tokens(context) <= 1_500
    assert reconstruct(engine.store, context) == messages
    assert [r[0] for r in engine.store.conn.execute("PRAGMA integrity_check")] == ["ok"]
    assert dag.context_items(engine.store, "s")
    # The full-text index caught up with what was written before and after the full volume.
    for turn in (0, 39):
        assert grep(engine.store, f"topic{turn}"), f"topic{turn} not found"
    engine.close()
