"""An idle agent frees its embedding model and loads it again on the next call.

The e5 model is the largest thing an idle agent holds; the worker frees it after
``embeddings_idle_release_seconds`` without a call (``EmbeddingWorker.release_after``).
The figures (resident memory before and after, the reload's time) are bench/lcm_idle_memory.py's.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import numpy as np
import pytest

from hermes_runtime.common.modelcache import model_cache_dir
from hermes_runtime.lcm.config import LcmConfig
from hermes_runtime.lcm.embed.e5onnx import OnnxE5Embedder
from hermes_runtime.lcm.embed.embedders import ReleasesIdleModel, StaticModelEmbedder
from hermes_runtime.lcm.engine.lcmengine import LcmEngine
from hermes_runtime.lcm.search.hybrid import hybrid_search

MODEL_CACHE = model_cache_dir(os.environ)  # the e5 graph, built once per machine

QUESTION = "What food can't my puppy eat?"


def wait_for(predicate, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.05)


def test_a_released_model_is_loaded_again_and_gives_the_same_vectors() -> None:
    e5 = OnnxE5Embedder(cache_dir=MODEL_CACHE)
    before = e5.embed_query(QUESTION)
    assert e5.loaded()
    assert not e5.release_idle(3600)  # used a moment ago: kept
    assert e5.loaded()
    assert e5.release_idle(0)
    assert not e5.loaded()
    assert np.array_equal(e5.embed_query(QUESTION), before)
    assert e5.loaded()


def test_only_models_worth_freeing_take_part() -> None:
    assert isinstance(OnnxE5Embedder(cache_dir=MODEL_CACHE), ReleasesIdleModel)
    assert not isinstance(StaticModelEmbedder(), ReleasesIdleModel)


def test_the_agents_worker_frees_the_model_once_idle_and_search_still_answers(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    config = LcmConfig.for_home(tmp_path, {"embeddings_idle_release_seconds": 0.5})
    e5 = OnnxE5Embedder(cache_dir=MODEL_CACHE)
    engine = LcmEngine(config, embedder=e5, start_worker=True)
    engine.start_background()
    assert engine.worker is not None
    try:
        engine.ingest(
            "s1", [{"role": "user", "content": "Our dog Biscuit is allergic to chicken."}]
        )
        engine.worker.wake()
        wait_for(lambda: engine.store.counts()["embed_queue"] == 0)
        wait_for(lambda: not e5.loaded())  # nothing to do for half a second: freed
        logged: list[str] = []
        wait_for(lambda: logged.append(capfd.readouterr().err) or "model_released" in logged[-1])
        assert engine.worker.errors == []
        released = [
            json.loads(line)
            for line in "".join(logged).splitlines()
            if "lcm.embeddings.model_released" in line
        ]
        assert [(r["model"], r["idle_seconds"]) for r in released] == [(e5.model, 0.5)]
        found = hybrid_search(
            engine.store, e5, QUESTION, None, 5, mode="vector", index=engine.vectors
        )
        assert [hit.snippet for hit in found][:1] == ["Our dog Biscuit is allergic to chicken."]
    finally:
        engine.close()


def test_zero_keeps_the_model(tmp_path: Path) -> None:
    config = LcmConfig.for_home(tmp_path, {"embeddings_idle_release_seconds": 0})
    e5 = OnnxE5Embedder(cache_dir=MODEL_CACHE)
    engine = LcmEngine(config, embedder=e5, start_worker=True)
    engine.start_background()
    assert engine.worker is not None
    try:
        engine.ingest("s1", [{"role": "user", "content": "The spare key is under the flowerpot."}])
        engine.worker.wake()
        wait_for(lambda: engine.store.counts()["embed_queue"] == 0)
        time.sleep(1.0)  # several idle rounds of the worker
        assert e5.loaded()
    finally:
        engine.close()
