"""Health checks and statistics that stay fast on a large database.

Integrity uses ``PRAGMA quick_check`` (no index-vs-table cross check, which
reads the whole database and would make a start wait on it), FTS consistency uses the
FTS5 ``integrity-check`` command, and orphan outputs are found by listing
``outputs/`` once against the outputs table.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import apsw

from hermes_runtime.common.errors import RuntimeFailure
from hermes_runtime.lcm.store.fulltext import ATTACHED_AS, SOURCES, Source
from hermes_runtime.lcm.store.lcmstore import LcmStore
from hermes_runtime.lcm.store.retention import retention
from hermes_runtime.lcm.store.schema import fetch_all, fetch_one, fetch_value


@dataclass
class DoctorReport:
    ok: bool
    checks: dict[str, Any] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)
    seconds: float = 0.0


def stats(store: LcmStore) -> dict[str, Any]:
    counts = store.counts()
    depth = fetch_value(store.conn, "SELECT max(depth) FROM summaries")
    levels = dict(store.conn.execute("SELECT level, count(*) FROM summaries GROUP BY level"))
    return {
        "database": str(store.db_path),
        **retention(store),
        **counts,
        "max_summary_depth": depth,
        "summaries_by_escalation_level": {str(k): v for k, v in levels.items()},
        "sqlite_version": apsw.sqlite_lib_version(),
    }


def doctor(store: LcmStore, full: bool = False) -> DoctorReport:
    """Run the checks. The default tier reads no page it can avoid: quick on any history.

    Default: file size against the page count (truncation), foreign keys,
    FTS consistency by document counts and highest ids (an index that missed
    or kept rows shows up there), and outputs on disk. ``full`` adds SQLite's
    ``integrity_check`` and FTS5's own ``integrity-check``, which read every
    page and posting, so they take time in proportion to the database (docs/lcm.md).
    """
    started = time.monotonic()
    report = DoctorReport(ok=True)
    _check_file_size(store, report)
    fk = fetch_all(store.conn, "PRAGMA foreign_key_check")
    report.checks["foreign_key_violations"] = len(fk)
    if fk:
        report.problems.append(f"foreign_key_check: {len(fk)} violations")
    _check_fulltext(store, report)
    if full:
        _full_checks(store, report)
    missing, orphans = _output_files(store)
    report.checks["missing_outputs"] = missing
    report.checks["orphan_outputs"] = orphans
    if missing:
        report.problems.append(f"{len(missing)} outputs referenced but missing on disk")
    report.ok = not report.problems
    report.seconds = round(time.monotonic() - started, 3)
    return report


def _check_file_size(store: LcmStore, report: DoctorReport) -> None:
    pages = fetch_value(store.conn, "PRAGMA page_count")
    page_size = fetch_value(store.conn, "PRAGMA page_size")
    on_disk = store.db_path.stat().st_size
    report.checks["pages"] = pages
    if on_disk < pages * page_size and not Path(str(store.db_path) + "-wal").exists():
        report.problems.append(
            f"{store.db_path} is {on_disk} bytes but holds {pages} pages of {page_size}: truncated"
        )


def _check_fulltext(store: LcmStore, report: DoctorReport) -> None:
    """The index file against lcm.db: the documents it holds are the rows up to its watermark.

    Rows past the watermark are the indexer's lag (a read-only doctor beside
    a running gateway sees up to ``INDEX_INTERVAL_SECONDS`` of it), reported,
    not a problem; a writable doctor catches up first.
    """
    try:
        conn = store.searchable()
    except RuntimeFailure as exc:
        report.checks["fulltext_index"] = "missing"
        report.problems.append(f"{exc}")
        return
    report.checks["fulltext_index"] = str(store.fulltext_path)
    for source in SOURCES:
        _check_fts_counts(conn, report, source)


def _check_fts_counts(conn: apsw.Connection, report: DoctorReport, source: Source) -> None:
    table, base = source.table, source.base
    # The watermark and the documents from one snapshot of the index: a running
    # indexer may commit a pass between two reads.
    conn.execute("SAVEPOINT doctor_fts")
    try:
        mark = fetch_one(conn, f"SELECT last_id FROM {ATTACHED_AS}.indexed WHERE base = ?", (base,))
        indexed = fetch_all(conn, f"SELECT count(*), max(id) FROM {ATTACHED_AS}.{table}_docsize")[0]
    finally:
        conn.execute("RELEASE doctor_fts")
    watermark = int(mark[0]) if mark else 0
    stored = fetch_all(conn, f"SELECT count(*), max(id) FROM {base} WHERE id <= ?", (watermark,))[0]
    behind = int(fetch_value(conn, f"SELECT count(*) FROM {base} WHERE id > ?", (watermark,)))
    report.checks[f"{table}_behind"] = behind
    report.checks[table] = "ok" if indexed == stored else f"indexed {indexed}, stored {stored}"
    if indexed != stored:
        report.problems.append(
            f"{table}: {indexed[0]} documents indexed for {stored[0]} rows "
            "(run: lcm doctor --rebuild-fts)"
        )


def _full_checks(store: LcmStore, report: DoctorReport) -> None:
    result = [r[0] for r in store.conn.execute("PRAGMA integrity_check")]
    report.checks["integrity_check"] = result[:5]
    if result != ["ok"]:
        report.problems.append(f"integrity_check: {'; '.join(map(str, result[:5]))}")
    if store.fulltext is not None:  # FTS5's own check is an INSERT: the index's writer runs it
        checked = store.fulltext.integrity_problems()
    else:  # read-only: SQLite's integrity_check of the index file covers FTS5 too
        try:
            conn = store.searchable()
        except RuntimeFailure:
            return  # reported missing by the default tier
        rows = [str(r[0]) for r in conn.execute(f"PRAGMA {ATTACHED_AS}.integrity_check")]
        verdict = "ok" if rows == ["ok"] else "; ".join(rows[:5])
        checked = {source.table: verdict for source in SOURCES}
    for table, verdict in checked.items():
        report.checks[f"{table}_integrity"] = verdict
        if verdict != "ok":
            report.problems.append(f"{table}: {verdict} (run: lcm doctor --rebuild-fts)")


def _output_files(store: LcmStore) -> tuple[list[str], list[str]]:
    known = {row[0]: row[1] for row in store.conn.execute("SELECT relpath, id FROM outputs")}
    on_disk: set[str] = set()
    if store.outputs_dir.exists():
        for path in store.outputs_dir.glob("*/*"):
            if path.is_file() and not path.name.startswith("."):
                on_disk.add(f"{path.parent.name}/{path.name}")
    missing = sorted(known[rel] for rel in set(known) - on_disk)
    orphans = sorted(set(on_disk) - set(known))
    return missing, orphans


def rebuild_fts(store: LcmStore) -> None:
    """Index lcm.db again from its first row, in one transaction of the index file."""
    if store.fulltext is None:
        raise RuntimeFailure(
            f"LCM full-text index {store.fulltext_path}: rebuilding needs a writable open"
        )
    store.flush()
    store.fulltext.rebuild()


DEFAULT_GC_GRACE_SECONDS = 3600.0


@dataclass
class OrphanSweep:
    """What ``remove_orphan_outputs`` did: removed files, and orphans left for later."""

    removed: list[str] = field(default_factory=list)
    removed_bytes: int = 0
    kept_recent: list[str] = field(default_factory=list)
    grace_seconds: float = DEFAULT_GC_GRACE_SECONDS

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def remove_orphan_outputs(
    store: LcmStore, grace_seconds: float = DEFAULT_GC_GRACE_SECONDS, now: float | None = None
) -> OrphanSweep:
    """Delete output files no row references, once they are older than ``grace_seconds``.

    Orphans come from a crash between writing an output (before the
    transaction) and committing its row; a file younger than the grace
    period may be exactly that write, about to be committed, so it stays.
    Leftover temp files of interrupted writes (``.NAME.*.tmp``) are swept
    the same way. Each deletion happens inside a write transaction after
    re-checking the outputs table, and ingest re-creates a content-addressed
    file it found missing inside its own transaction, so a referenced file
    is never deleted, even with a gateway writing meanwhile.
    """
    sweep = OrphanSweep(grace_seconds=grace_seconds)
    _, orphans = _output_files(store)
    candidates = orphans + _temp_files(store)
    cutoff = (time.time() if now is None else now) - grace_seconds
    for relpath in candidates:
        path = store.outputs_dir / relpath
        with store.writing() as conn:
            referenced = fetch_value(conn, "SELECT 1 FROM outputs WHERE relpath = ?", (relpath,))
            try:
                stat = path.stat()
            except FileNotFoundError:
                continue
            if referenced:
                continue
            if stat.st_mtime > cutoff:
                sweep.kept_recent.append(relpath)
                continue
            path.unlink()
        sweep.removed.append(relpath)
        sweep.removed_bytes += stat.st_size
    return sweep


def _temp_files(store: LcmStore) -> list[str]:
    """Temp files of interrupted atomic writes (``atomic_writer`` names them ``.NAME.*.tmp``)."""
    if not store.outputs_dir.exists():
        return []
    return sorted(
        f"{path.parent.name}/{path.name}"
        for path in store.outputs_dir.glob("*/.*.tmp")
        if path.is_file()
    )
