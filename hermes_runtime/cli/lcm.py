"""`hermes-runtime lcm`: import history, assemble context, search, expand, stats, doctor."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from hermes_runtime.cli._shared import add_group, print_json
from hermes_runtime.common.errors import RuntimeFailure


def register(subparsers: Any) -> None:
    verbs = add_group(
        subparsers,
        "lcm",
        "Lossless Context Management: import history, assemble context, search, expand.",
    )
    _import_parser(verbs)
    p = verbs.add_parser(
        "context", help="a session's stored context: the newest items within a token budget"
    )
    _common(p)
    p.add_argument("--session", required=True)
    p.add_argument(
        "--budget", type=int, required=True, help="tokens; the newest stored items that fit"
    )
    p.set_defaults(handler=_context)
    p = verbs.add_parser("grep", help="full-text (or regex) search")
    _common(p)
    p.add_argument("--session", help="one session (default: all sessions)")
    p.add_argument("--regex", action="store_true", help="QUERY is a Python regular expression")
    p.add_argument("--limit", type=int, default=20)
    p.add_argument("query")
    p.set_defaults(handler=_grep)
    p = verbs.add_parser("search", help="hybrid full-text + vector search")
    _common(p)
    p.add_argument("--session", help="one session (default: all sessions)")
    p.add_argument("--limit", type=int, default=10)
    p.add_argument("--mode", choices=["hybrid", "fts", "vector"], default="hybrid")
    p.add_argument(
        "--embed-pending",
        type=_non_negative,
        default=256,
        metavar="N",
        help="embed at most N queued items in memory for this search (the database stays "
        "read-only; the agent's worker stores vectors; 0: search only what is embedded)",
    )
    p.add_argument("query")
    p.set_defaults(handler=_search)
    p = verbs.add_parser("expand", help="a summary's sources, a message or an output in full")
    _common(p)
    p.add_argument("--offset", type=int, default=0)
    p.add_argument("--limit", type=int, default=50)
    p.add_argument("id", help="sum_N, msg_N or out_HEX")
    p.set_defaults(handler=_expand)
    p = verbs.add_parser("stats", help="counts and sizes")
    _common(p)
    p.set_defaults(handler=_stats)
    p = verbs.add_parser("doctor", help="integrity, FTS consistency, orphan outputs")
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
    p.add_argument(
        "--grace-seconds",
        type=float,
        default=3600.0,
        help="with --fix: keep orphans younger than this (a write may be about to commit)",
    )
    p.set_defaults(handler=_doctor)


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--db", required=True, type=Path, help="LCM database (e.g. /opt/data/lcm.db)")
    p.add_argument("--outputs", type=Path, help="externalized outputs dir (default: beside --db)")
    p.add_argument("--json", action="store_true", help="machine-readable output")


def _llm_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--llm-base-url", help="OpenAI-compatible endpoint for summaries")
    p.add_argument("--llm-model", default="default")
    p.add_argument(
        "--llm-api-key-env", default="OPENAI_API_KEY", help="env var holding the API key"
    )


def _import_parser(verbs: Any) -> None:
    p = verbs.add_parser("import", help="ingest a JSONL file (or Hermes' state.db) and compact")
    _common(p)
    p.add_argument("--session", help="session id for a JSONL file (required with FILE)")
    source = p.add_mutually_exclusive_group(required=True)
    source.add_argument("--hermes-state", type=Path, help="import every session of this state.db")
    p.add_argument(
        "--prefix", default="", help="with --hermes-state: prepend this to each session id"
    )
    p.add_argument(
        "--before",
        type=float,
        help="with --hermes-state: only messages written before this time (epoch seconds)",
    )
    p.add_argument("--budget", type=int, default=32_000, help="compact each session to this")
    _llm_options(p)
    source.add_argument("file", nargs="?", type=Path, help="OpenAI-format messages, one per line")
    p.set_defaults(handler=_import, usage_error=p.error)


def _config(args: argparse.Namespace) -> Any:
    from hermes_runtime.lcm import LcmConfig

    return LcmConfig(db_path=args.db, outputs_dir=args.outputs or args.db.parent / "outputs")


def _summarizer(args: argparse.Namespace) -> Any:
    from hermes_runtime.lcm import make_summarizer

    if not args.llm_base_url:
        return None
    return make_summarizer(
        args.llm_base_url, args.llm_model, os.environ.get(args.llm_api_key_env, "")
    )


@contextlib.contextmanager
def _reading(args: argparse.Namespace) -> Iterator[Any]:
    """The database, read-only (refused, untouched, unless it is an LCM database)."""
    from hermes_runtime.lcm import open_readonly

    store = open_readonly(args.db, args.outputs)
    try:
        yield store
    finally:
        store.close()


def _import(args: argparse.Namespace) -> int:
    from hermes_runtime.lcm import import_history

    if args.file is not None and not args.session:
        args.usage_error("--session is required with FILE")  # exit 2, like argparse's own
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
    _emit(args, result.as_dict(), text)
    return 0


def _context(args: argparse.Namespace) -> int:
    from hermes_runtime.lcm import context_within

    with _reading(args) as store:
        payload = context_within(store, args.session, args.budget)
    _emit(args, payload, json.dumps(payload["messages"], ensure_ascii=False, indent=2))
    return 0


def _grep(args: argparse.Namespace) -> int:
    from hermes_runtime.lcm import grep

    with _reading(args) as store:
        hits = grep(store, args.query, args.session, args.limit, args.regex)
    _emit_hits(args, hits)
    return 0


def _non_negative(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, got {value}")
    return value


def _search(args: argparse.Namespace) -> int:
    from hermes_runtime.lcm import search_history

    with _reading(args) as store:
        found = search_history(
            store, args.query, args.session, args.limit, args.mode, args.embed_pending
        )
    _emit_hits(args, found.hits, {"pending_embeddings": found.pending_embeddings})
    return 0


def _expand(args: argparse.Namespace) -> int:
    from hermes_runtime.lcm import expand

    with _reading(args) as store:
        payload = expand(store, args.id, args.offset, args.limit)
    _emit(args, payload, json.dumps(payload, ensure_ascii=False, indent=2))
    return 0


def _stats(args: argparse.Namespace) -> int:
    from hermes_runtime.lcm import stats

    with _reading(args) as store:
        payload = stats(store)
    _emit(args, payload, "\n".join(f"{k}: {v}" for k, v in payload.items()))
    return 0


def _doctor(args: argparse.Namespace) -> int:
    from hermes_runtime.lcm import LcmStore, doctor, rebuild_fts, remove_orphan_outputs

    if args.grace_seconds < 0:
        raise RuntimeFailure(f"--grace-seconds {args.grace_seconds}: must be 0 or more")
    writes = args.fix or args.rebuild_fts
    store = LcmStore(args.db, args.outputs, readonly=not writes, create=False)
    try:
        if args.rebuild_fts:
            rebuild_fts(store)
        sweep = remove_orphan_outputs(store, args.grace_seconds) if args.fix else None
        report = doctor(store, full=args.full)
    finally:
        store.close()
    payload: dict[str, Any] = {
        "ok": report.ok,
        "checks": report.checks,
        "problems": report.problems,
        "seconds": report.seconds,
    }
    lines = ["ok"] if report.ok else ["problems:", *(f"- {p}" for p in report.problems)]
    if sweep is not None:
        payload["fixed"] = sweep.as_dict()
        lines += [f"removed orphan output {rel}" for rel in sweep.removed]
        lines.append(
            f"removed {len(sweep.removed)} orphan file(s), {sweep.removed_bytes} bytes; "
            f"{len(sweep.kept_recent)} younger than {args.grace_seconds:g} s kept"
        )
    _emit(args, payload, "\n".join(lines))
    return 0 if report.ok else 1


def _emit_hits(
    args: argparse.Namespace, hits: list[Any], extra: dict[str, Any] | None = None
) -> None:
    rows = [h.as_dict() for h in hits]
    text = "\n".join(
        f"{h.id}\t{h.session_id}\t{h.role or h.kind}\t"
        f"{'' if h.count == 1 else f'(x{h.count}) '}{h.snippet.replace(chr(10), ' ')[:160]}"
        for h in hits
    )
    if extra and extra.get("pending_embeddings"):
        text += (
            f"\n({extra['pending_embeddings']} items not embedded yet: vector ranking is partial)"
        )
    _emit(args, {"results": rows, **(extra or {})}, text or "no results")


def _emit(args: argparse.Namespace, payload: Any, text: str) -> None:
    if args.json:
        print_json(payload)
    else:
        print(text)
