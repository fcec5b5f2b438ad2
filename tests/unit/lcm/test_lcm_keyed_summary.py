"""A summary replaces its run only if the run's positions still hold exactly its sources."""

from __future__ import annotations

import concurrent.futures
import time
from dataclasses import replace
from pathlib import Path

from fakes.fixtures import FakeLLM
from support.lcm_conversations import reconstruct, simple_conversation
from test_lcm_host_contract import assert_dag_intact

from hermes_runtime.lcm.compact.summarize import make_summarizer
from hermes_runtime.lcm.config import LcmConfig
from hermes_runtime.lcm.engine.lcmengine import LcmEngine


def test_two_engines_with_overlapping_runs_summarize_each_message_once(
    tmp_path: Path, fake_llm: FakeLLM
) -> None:
    """Engine A folds the oldest run of several messages, engine B (a fresh tail of all but
    one item) only the oldest message; both plan before either writes. Whichever writes
    second finds its run's positions holding as many items as it planned, but not the same
    ones: old code wrote it anyway (a message summarized twice, a summary left out of the
    context)."""
    base = LcmConfig.for_home(tmp_path, {"embeddings": "off"})
    history = simple_conversation(10, filler=40)
    engines = [
        LcmEngine(
            replace(base, policy=replace(base.policy, fresh_tail_messages=tail)),
            make_summarizer(fake_llm.base_url, "fake-model"),
        )
        for tail in (4, len(history) - 1)
    ]
    engines[0].ingest("s1", history)
    fake_llm.set_mode("hang", hang_seconds=1.0)
    with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
        runs = [pool.submit(e.compactions.compact, "s1", 300) for e in engines]
        while len(fake_llm.requests()) < 2:  # both have planned and are waiting on the model
            time.sleep(0.01)
        fake_llm.set_mode("normal")
        for run in runs:
            run.result()
    store = engines[0].store
    context = engines[0].context("s1")
    assert reconstruct(store, context) == history
    assert_dag_intact(store, "s1", context)
    for engine in engines:
        engine.close()
