"""Retention figures: how big the history is, how far back it goes, how fast it grows.

Why a module of its own: the engine refreshes these gauges after its
compactions (``compactrun.py``), and ``lcm stats`` reports them; neither is a
health check, so neither needs ``doctor``. Cheap at any size: a dozen
indexed lookups, no scan.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hermes_runtime.lcm import metrics
from hermes_runtime.lcm.store.fulltext import index_path
from hermes_runtime.lcm.store.schema import fetch_one

if TYPE_CHECKING:
    from hermes_runtime.lcm.store.lcmstore import LcmStore


def database_bytes(db_path: Path) -> int:
    """lcm.db and its full-text index file, each with its WAL: what LCM takes on the volume."""
    total = 0
    for base in (db_path, index_path(db_path)):
        for suffix in ("", "-wal"):
            path = Path(str(base) + suffix)
            if path.exists():
                total += path.stat().st_size
    return total


GROWTH_WINDOW_DAYS = 7


def retention(store: LcmStore, now: float | None = None) -> dict[str, Any]:
    """Size, how far back the history goes, and how fast it grows; also set as metrics.

    Cheap at any size (a dozen indexed lookups, no scan), so the engine
    refreshes it after compactions (``RETENTION_REFRESH_SECONDS`` apart at most): messages are
    immutable and their ids follow their write times, so the first message
    of the growth window is found by bisecting ids.
    """
    now = time.time() if now is None else now
    size = database_bytes(store.db_path)
    first = fetch_one(store.conn, "SELECT id, created_at FROM messages ORDER BY id LIMIT 1")
    last = fetch_one(store.conn, "SELECT id, created_at FROM messages ORDER BY id DESC LIMIT 1")
    figures: dict[str, Any] = {"database_bytes": size}
    if first is None or last is None:
        metrics.DATABASE_BYTES.set(size)
        return {**figures, "oldest_message_at": None, "newest_message_at": None}
    count = int(last[0]) - int(first[0]) + 1
    since = now - GROWTH_WINDOW_DAYS * 86_400
    recent = int(last[0]) - first_id_since(store, since, int(first[0]), int(last[0])) + 1
    span_days = max((now - max(float(first[1]), since)) / 86_400, 1 / 24)
    per_day = recent / span_days
    growth = per_day * size / count
    figures.update(
        oldest_message_at=float(first[1]),
        newest_message_at=float(last[1]),
        history_days=round((now - float(first[1])) / 86_400, 2),
        bytes_per_message=round(size / count),
        messages_last_7_days=recent,
        messages_per_day=round(per_day, 1),
        growth_bytes_per_day=round(growth),
    )
    metrics.DATABASE_BYTES.set(size)
    metrics.MESSAGES_STORED.set(count)
    metrics.OLDEST_MESSAGE.set(float(first[1]))
    metrics.GROWTH_BYTES_PER_DAY.set(round(growth))
    return figures


def first_id_since(store: LcmStore, since: float, low: int, high: int) -> int:
    """The smallest message id written at or after ``since`` (``high + 1`` if none)."""
    answer = high + 1
    while low <= high:
        middle = (low + high) // 2
        row = fetch_one(
            store.conn,
            "SELECT id, created_at FROM messages WHERE id >= ? ORDER BY id LIMIT 1",
            (middle,),
        )
        if row is None or float(row[1]) < since:
            low = (int(row[0]) if row else middle) + 1
        else:
            answer, high = int(row[0]), middle - 1
    return answer
