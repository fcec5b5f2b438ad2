"""Orphan output files: swept after a grace period, never a file a row references."""

from __future__ import annotations

import os
import time
from pathlib import Path

from hermes_runtime.lcm.engine.lcmengine import LcmEngine
from hermes_runtime.lcm.ops.doctor import doctor, remove_orphan_outputs
from hermes_runtime.lcm.store import messagereads
from hermes_runtime.lcm.store.batchrows import Placed
from hermes_runtime.lcm.store.lcmstore import LcmStore
from hermes_runtime.lcm.store.outputs import relpath_for

HOUR = 3600.0


def orphan(store: LcmStore, name: str, text: str, age_seconds: float) -> Path:
    """A file in outputs/ with no row, as a crash between write and commit leaves it."""
    path = store.outputs_dir / name[:2] / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    stamp = time.time() - age_seconds
    os.utime(path, (stamp, stamp))
    return path


def test_old_orphans_and_temp_files_go_young_ones_and_referenced_files_stay(
    engine: LcmEngine,
) -> None:
    store = engine.store
    kept = store.ingest("s", {"role": "tool", "tool_call_id": "c", "content": "k" * 9_000})
    record = messagereads.output(store, str(kept.output_id))
    assert record is not None
    referenced = store.outputs_dir / record.relpath
    os.utime(referenced, (time.time() - 10 * HOUR,) * 2)  # old, but a row points at it
    old = orphan(store, "ab" + "1" * 62, "left by a crash", 2 * HOUR)
    young = orphan(store, "cd" + "2" * 62, "about to be committed", 60)
    temp = orphan(store, ".ef" + "3" * 62 + ".x1y2.tmp", "interrupted write", 2 * HOUR)

    sweep = remove_orphan_outputs(store, grace_seconds=HOUR)

    assert sorted(sweep.removed) == sorted([f"ab/{old.name}", f"{temp.parent.name}/{temp.name}"])
    assert sweep.removed_bytes == len("left by a crash") + len("interrupted write")
    assert sweep.kept_recent == [f"cd/{young.name}"]
    assert referenced.exists() and young.exists()
    assert not old.exists() and not temp.exists()
    report = doctor(store)
    assert report.ok and report.checks["orphan_outputs"] == [f"cd/{young.name}"]
    assert messagereads.full_message(store, kept)["content"] == "k" * 9_000


def test_a_file_swept_between_write_and_commit_is_written_again(engine: LcmEngine) -> None:
    """The race the grace period cannot cover: an old orphan reused by a new ingest.

    Content addressing lets an ingest find its file already on disk (an old
    orphan with the same bytes) and skip writing it; a sweep may delete that
    file before the row commits. Ingest re-checks inside its transaction.
    """
    store = engine.store
    content = "r" * 9_000
    message = {"role": "tool", "tool_call_id": "c", "content": content}
    prepared = store._prepare(message)  # writes (or finds) the content-addressed file
    path = store.outputs_dir / relpath_for(prepared["output"][1])
    os.utime(path, (time.time() - 2 * HOUR,) * 2)
    assert remove_orphan_outputs(store, grace_seconds=HOUR).removed == [
        relpath_for(prepared["output"][1])
    ]
    assert not path.exists()
    with store.writing():  # the rest of ingest_many: its transaction
        seq, position = store._ensure_session("s")
        placed = Placed("s", seq, position, prepared, time.time())
        [stored] = store._insert_messages([placed])
    assert path.exists()
    assert messagereads.full_message(store, stored)["content"] == content
    assert doctor(store).checks["missing_outputs"] == []


def test_grace_zero_sweeps_every_orphan_now(engine: LcmEngine) -> None:
    store = engine.store
    fresh = orphan(store, "ab" + "4" * 62, "just written", 0)
    assert remove_orphan_outputs(store, grace_seconds=0, now=time.time() + 1).removed == [
        f"ab/{fresh.name}"
    ]
