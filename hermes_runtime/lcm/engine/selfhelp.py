"""What the agent asks about its own memory: ``lcm_status`` and ``lcm_doctor``.

Why a module of its own: the retrieval tools read history; these two read
LCM itself (what is stored, embedded and compacted, and whether it is
healthy), from the figures ``lcm stats`` and ``lcm doctor`` already compute
(``ops/doctor.py``, ``store/retention.py``, ``embed/embedstatus.py``), so the
agent and an operator see the same numbers. Both run during a turn, so both
stay cheap at any size: no full-tier integrity check, no embedding of a
sample to measure a rate, and nothing is repaired or written. A repair is an
operator's command, which the answer names.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from hermes_runtime.lcm.compact.summarize import LEVEL_DETERMINISTIC
from hermes_runtime.lcm.embed.embedders import Embedder
from hermes_runtime.lcm.embed.embedstatus import embedding_backlog, queue_length, recent_rate
from hermes_runtime.lcm.ops.doctor import DoctorReport, doctor, stats
from hermes_runtime.lcm.search.searchreads import session_span
from hermes_runtime.lcm.store.dag import latest_summary_level, session_compaction
from hermes_runtime.lcm.store.lcmstore import LcmStore

REBUILD_FTS = "an operator runs `hermes-runtime lcm doctor --rebuild-fts`"


def _iso(stamp: Any) -> str | None:
    return None if stamp is None else datetime.fromtimestamp(float(stamp), UTC).isoformat()


def status(
    store: LcmStore, embedder: Embedder | None, worker: bool, session_id: str | None
) -> dict[str, Any]:
    """What is stored, embedded and compacted (this session's share too), as small JSON."""
    figures = stats(store)
    stored = {
        key: figures.get(key)
        for key in ("sessions", "messages", "summaries", "outputs", "database_bytes")
    }
    stored["oldest_message_at"] = _iso(figures.get("oldest_message_at"))
    stored["newest_message_at"] = _iso(figures.get("newest_message_at"))
    stored["messages_last_7_days"] = figures.get("messages_last_7_days", 0)
    compacted: dict[str, Any] = {
        "summaries": figures["summaries"],
        "max_summary_depth": figures["max_summary_depth"] or 0,
        "summaries_by_escalation_level": figures["summaries_by_escalation_level"],
    }
    if session_id:
        span = session_span(store, session_id)
        messages = int(span[2] or 0) if span else 0
        compacted["session"] = {
            "id": session_id,
            "messages": messages,
            **session_compaction(store, session_id),
        }
    return {
        "stored": stored,
        "embedded": embedded(store, embedder, worker, figures),
        "compacted": compacted,
    }


def embedded(
    store: LcmStore, embedder: Embedder | None, worker: bool, figures: dict[str, Any]
) -> dict[str, Any]:
    """Items with a vector of the model against those without: how far behind the embedder is.

    The rate is the worker's over its last minute of work (None while it is
    idle or before its first batch); the time left is the backlog at that rate.
    """
    if embedder is None:
        return {"enabled": False, "note": "embeddings off: lcm_search ranks by words only"}
    items = int(figures["messages"]) + int(figures["summaries"])
    pending = embedding_backlog(store, embedder.model)
    rate = recent_rate()
    return {
        "enabled": True,
        "model": embedder.model,
        "items": items,
        "embedded": items - pending,
        "pending": pending,
        "queued": queue_length(store),
        "worker_running": worker,
        "items_per_second": rate,
        "eta_seconds": round(pending / rate) if rate and pending else (0 if not pending else None),
    }


def _check(name: str, ok: bool, detail: str, fix: str | None = None) -> dict[str, Any]:
    return {"name": name, "ok": ok, "detail": detail, "fix": None if ok else fix}


def health(store: LcmStore, embedder: Embedder | None, worker: bool) -> dict[str, Any]:
    """``lcm doctor``'s default tier, as checks with ok/problem and what to do about each.

    Writes held for want of storage are checked first: every other check reads
    through the store, which would raise the held error instead of answering.
    """
    held = store.group_commit.held if store.group_commit is not None else None
    if held is not None:
        checks = [
            _check(
                "turn_writes",
                False,
                f"new turns are held in memory, not written: {held}",
                "the data volume is full or read-only; an operator frees space "
                "(docs/chart.md, 'A full data volume'); held turns are written then",
            )
        ]
        return {"ok": False, "checks": checks}
    report = doctor(store)
    checks = [
        _database_check(report),
        _check(
            "foreign_keys",
            not report.checks.get("foreign_key_violations"),
            f"{report.checks.get('foreign_key_violations', 0)} foreign key violations",
            "an operator restores lcm.db from the last backup",
        ),
        _fulltext_check(report),
        *_output_checks(report),
        _embedding_check(store, embedder, worker),
        _summary_check(store),
    ]
    return {
        "ok": all(c["ok"] for c in checks),
        "checks": checks,
        "seconds": report.seconds,
    }


def _database_check(report: DoctorReport) -> dict[str, Any]:
    truncated = [p for p in report.problems if "truncated" in p]
    detail = truncated[0] if truncated else f"{report.checks.get('pages')} pages, whole"
    return _check(
        "database_file", not truncated, detail, "an operator restores lcm.db from the last backup"
    )


def _fulltext_check(report: DoctorReport) -> dict[str, Any]:
    found = report.checks
    if found.get("fulltext_index") == "missing":
        problem = next((p for p in report.problems if "full-text" in p), "missing")
        return _check("fulltext_index", False, problem, REBUILD_FTS)
    wrong = [t for t in ("messages_fts", "summaries_fts") if found.get(t) not in (None, "ok")]
    behind = found.get("messages_fts_behind", 0)
    detail = (
        f"{', '.join(f'{t}: {found[t]}' for t in wrong)}"
        if wrong
        else f"consistent; {behind} newest messages not indexed yet"
    )
    return _check(
        "fulltext_index", not wrong, detail, f"{REBUILD_FTS}; lcm_search still ranks by vectors"
    )


def _output_checks(report: DoctorReport) -> list[dict[str, Any]]:
    missing = list(report.checks.get("missing_outputs") or [])
    orphans = list(report.checks.get("orphan_outputs") or [])
    detail = f"{len(missing)} externalized outputs missing on disk"
    if missing:
        detail += f": {', '.join(missing[:5])}"
    return [
        _check(
            "outputs_on_disk",
            not missing,
            detail,
            "lcm_read_output and lcm_expand fail for those ids; an operator restores "
            "outputs/ from the last backup",
        ),
        _check(
            "orphan_outputs",
            True,
            f"{len(orphans)} output files no message references "
            "(`hermes-runtime lcm doctor --fix` removes them; harmless)",
        ),
    ]


def _embedding_check(store: LcmStore, embedder: Embedder | None, worker: bool) -> dict[str, Any]:
    if embedder is None:
        return _check("embeddings", True, "off: lcm_search ranks by words only")
    pending = embedding_backlog(store, embedder.model)
    stalled = bool(pending) and not worker
    detail = f"{pending} items not embedded yet ({embedder.model})"
    if pending:
        detail += "; until then lcm_search finds them by words only"
    return _check(
        "embeddings",
        not stalled,
        detail + ("; no embedding worker runs in this process" if stalled else ""),
        "an operator runs `hermes-runtime lcm embed` (every core) to embed the backlog",
    )


def _summary_check(store: LcmStore) -> dict[str, Any]:
    level = latest_summary_level(store)
    if level is None:
        return _check("summaries", True, "no compaction yet")
    fallback = level == LEVEL_DETERMINISTIC
    detail = (
        "the newest summary is a deterministic excerpt: the summary model failed then"
        if fallback
        else f"the newest summary was written by the model (level {level})"
    )
    return _check(
        "summaries",
        not fallback,
        detail,
        "check the summary model's endpoint and key (lcm.summary_base_url, else the "
        "agent's own model); later compactions use the model again once it answers",
    )
