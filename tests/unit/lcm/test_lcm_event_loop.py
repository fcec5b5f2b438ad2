"""LCM's heavy work runs beside the host's event loop, never on it nor holding it.

The Hermes gateway serves its API on an asyncio loop and runs agents (and so
LCM's compaction and sync) on threads; the embedding worker is a thread of
its own. The loop then only stalls if LCM's work keeps the GIL: a native call
that holds it for long (the static model's Rust code did: lossless-claw
#1067 froze a loop for 1.5 s). These tests are behavioural: the loop must
keep ticking while a long compaction waits on its summarizer and while the
worker embeds a long queue, and every GIL-holding embedder call stays small.
How late the loop gets is a benchmark (bench/lcm_loop_lag.py), not a test.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import numpy as np
from fakes.fixtures import FakeLLM

from hermes_runtime.lcm.compact.policy import CompactionPolicy
from hermes_runtime.lcm.compact.summarize import LEVEL_DETAILED, OpenAISummarizer
from hermes_runtime.lcm.config import LcmConfig
from hermes_runtime.lcm.embed.embedbatch import EMBED_CHUNK, EMBED_CHUNK_CHARS, embed_chunks
from hermes_runtime.lcm.embed.embedders import MAX_EMBED_CHARS, StaticModelEmbedder
from hermes_runtime.lcm.engine.lcmengine import LcmEngine

HANG_SECONDS = 0.3  # each summary request waits this long at the fake provider


class _Ticks:
    """A counter the loop advances; embedder calls note where it stood."""

    def __init__(self) -> None:
        self.count = 0


class _WatchedStatic(StaticModelEmbedder):
    """The real static model; each call records (loop ticks so far, characters read)."""

    def __init__(self, ticks: _Ticks) -> None:
        super().__init__()
        self.ticks = ticks
        self.calls: list[tuple[int, int]] = []

    def embed(self, texts: list[str]) -> np.ndarray:
        self.calls.append((self.ticks.count, sum(min(len(t), MAX_EMBED_CHARS) for t in texts)))
        return super().embed(texts)


def _long_messages(count: int) -> list[dict[str, str]]:
    return [
        {"role": ("user", "assistant")[i % 2], "content": f"note {i} " + "harbour tide " * 150}
        for i in range(count)
    ]


def test_the_loop_ticks_through_a_long_compaction_and_embedding(
    tmp_path: Path, fake_llm: FakeLLM
) -> None:
    fake_llm.set_mode("hang", hang_seconds=HANG_SECONDS)
    policy = CompactionPolicy(
        fresh_tail_messages=4, leaf_chunk_tokens=2_500, leaf_target_tokens=200
    )
    base = LcmConfig.for_home(tmp_path, {"embeddings": "off"})
    ticks = _Ticks()
    embedder = _WatchedStatic(ticks)
    engine = LcmEngine(
        LcmConfig(**{**base.__dict__, "policy": policy}),
        summarizer=OpenAISummarizer(fake_llm.base_url, "m"),
        embedder=embedder,
        start_worker=True,  # drains the queue beside the compaction
    )
    engine.start_background()
    engine.ingest("s", _long_messages(20))

    async def host() -> tuple[int, object]:
        done = asyncio.Event()

        async def tick() -> None:
            while not done.is_set():
                await asyncio.sleep(0.01)
                ticks.count += 1

        ticker = asyncio.create_task(tick())
        before = ticks.count
        # as Hermes' gateway runs an agent: on a thread, the loop awaiting it
        report = await asyncio.to_thread(engine.compactions.compact, "s", 3_000)
        during = ticks.count - before
        while engine.store.counts()["embed_queue"]:
            await asyncio.sleep(0.05)
        done.set()
        await ticker
        return during, report

    try:
        during, report = asyncio.run(host())
        summary_calls = len(fake_llm.requests())
        assert LEVEL_DETAILED in report.levels  # type: ignore[attr-defined]
        assert summary_calls >= 2
        # each summary call alone kept the compaction HANG_SECONDS long: a loop
        # frozen by it (run on the loop's thread, or the GIL kept) would not tick
        assert during >= summary_calls, (during, summary_calls)
        counts = engine.store.counts()
        assert counts["embeddings"] == counts["messages"] + counts["summaries"]
        reads = [chars for _, chars in embedder.calls]
        assert len(embedder.calls) > 1 and max(reads) <= EMBED_CHUNK_CHARS
        seen = [at for at, _ in embedder.calls]
        assert seen[-1] > seen[0], "the loop never ran while the queue was embedded"
    finally:
        engine.close()


def test_embedder_calls_are_bounded_by_texts_and_characters() -> None:
    texts = ["a" * 900] * 10 + ["b" * 5_000] + ["c" * 10] * 40
    chunks = embed_chunks(texts)
    assert [t for chunk in chunks for t in chunk] == texts  # all of them, in order
    for chunk in chunks:
        read = sum(min(len(t), MAX_EMBED_CHARS) for t in chunk)
        assert len(chunk) <= EMBED_CHUNK
        assert read <= EMBED_CHUNK_CHARS
    assert max(len(chunk) for chunk in chunks) == EMBED_CHUNK  # short texts fill a call
    assert embed_chunks([]) == []
    assert embed_chunks(["x" * 3_000], max_chars=1_000) == [["x" * 3_000]]  # one goes alone
