"""Time-filtered recall: a tool's ``since``/``until`` text to the ids a search may return.

Why ids: messages are immutable and their ids follow their write times
(``retention.py`` relies on the same rule), so a time window of messages is
one id range, found by bisecting ids (a dozen indexed lookups at any size).
Every ranking then filters on that range before it takes its top results:
FTS5 reads the range as a rowid constraint, the vector index as a mask. A
filter applied after the top-k would let older matches crowd the window out.

A summary belongs to a window when the span of messages it covers
(``start_at``..``end_at``) overlaps it; summaries are few, so their ids are
read with one query.

Accepted text: an ISO 8601 date (``2026-11-30``) or datetime
(``2026-11-30T14:00``, ``...Z``, ``...+01:00``), without a zone read as UTC;
or an age back from now, a number and a unit ``m``/``h``/``d``/``w`` (``7d``,
``36h``). A date as ``until`` includes that whole day.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from typing import TYPE_CHECKING, Any

import numpy as np

from hermes_runtime.common.errors import RuntimeFailure
from hermes_runtime.lcm.store.retention import first_id_since
from hermes_runtime.lcm.store.schema import fetch_all, fetch_one

if TYPE_CHECKING:
    from hermes_runtime.lcm.store.lcmstore import LcmStore

AGE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([mhdw])\s*$", re.IGNORECASE)
UNIT_SECONDS = {"m": 60, "h": 3_600, "d": 86_400, "w": 7 * 86_400}
DATE_ONLY = re.compile(r"^\s*\d{4}-\d{2}-\d{2}\s*$")
EXPECTED = "an ISO 8601 date or datetime (2026-11-30, 2026-11-30T14:00Z) or an age like 7d or 36h"


def parse_instant(name: str, text: Any, now: float, end_of_day: bool = False) -> float:
    """The Unix time ``text`` names; ``RuntimeFailure`` naming the parameter ``name`` if none.

    ``end_of_day``: a bare date stands for the end of that day (an ``until``
    of a date includes the day), not its start.
    """
    if not isinstance(text, str) or not text.strip():
        raise RuntimeFailure(f"{name}: expected {EXPECTED}, got {text!r}")
    age = AGE.match(text)
    if age:
        return now - float(age.group(1)) * UNIT_SECONDS[age.group(2).lower()]
    try:
        if DATE_ONLY.match(text):
            day = date.fromisoformat(text.strip()) + timedelta(days=1 if end_of_day else 0)
            return datetime(day.year, day.month, day.day, tzinfo=UTC).timestamp()
        moment = datetime.fromisoformat(text.strip())
    except ValueError:
        raise RuntimeFailure(f"{name}: expected {EXPECTED}, got {text!r}") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.timestamp()


@dataclass(frozen=True)
class TimeWindow:
    """``since`` <= written < ``until`` (Unix times; None: open on that side)."""

    since: float | None = None
    until: float | None = None

    @classmethod
    def from_args(
        cls, tool: str, args: dict[str, Any], now: float | None = None
    ) -> TimeWindow | None:
        """The window a tool call's ``since``/``until`` name (None when it names neither)."""
        now = time.time() if now is None else now
        raw_since, raw_until = args.get("since"), args.get("until")
        if raw_since in (None, "") and raw_until in (None, ""):
            return None
        since = (
            parse_instant(f"{tool}: since", raw_since, now) if raw_since not in (None, "") else None
        )
        until = (
            parse_instant(f"{tool}: until", raw_until, now, end_of_day=True)
            if raw_until not in (None, "")
            else None
        )
        if since is not None and until is not None and since >= until:
            raise RuntimeFailure(
                f"{tool}: since ({raw_since!r}) must be before until ({raw_until!r})"
            )
        return cls(since, until)

    def ids(self, store: LcmStore) -> IdWindow:
        """The messages and summaries written in this window, as ids (see the module doc)."""
        first = fetch_one(store.conn, "SELECT min(id), max(id) FROM messages")
        low, high = 1, 0  # an empty range
        if first is not None and first[0] is not None:
            top = int(first[1])
            low = int(first[0]) if self.since is None else self._first(store, self.since, first)
            high = top if self.until is None else self._first(store, self.until, first) - 1
        rows = fetch_all(
            store.conn,
            "SELECT id FROM summaries WHERE end_at >= ? AND start_at < ?",
            (self.since if self.since is not None else float("-inf"), self._until_or_inf()),
        )
        spans = (self.since if self.since is not None else float("-inf"), self._until_or_inf())
        return IdWindow(low, high, frozenset(int(r[0]) for r in rows), spans)

    def _until_or_inf(self) -> float:
        return self.until if self.until is not None else float("inf")

    @staticmethod
    def _first(store: LcmStore, at: float, bounds: tuple[Any, ...]) -> int:
        return first_id_since(store, at, int(bounds[0]), int(bounds[1]))


@dataclass(frozen=True)
class IdWindow:
    """What a time window allows: messages ``first``..``last`` (ids), and these summaries
    (those whose span of messages overlaps ``span``, Unix times)."""

    first: int
    last: int
    summaries: frozenset[int]
    span: tuple[float, float]

    def sql(self, kind: str, alias: str, id_column: str = "") -> tuple[str, list[Any]]:
        """An ``AND ...`` clause (and its parameters) over the rows of ``alias``.

        ``id_column``: the message id as the query should test it (a full-text
        table's ``rowid``, which FTS5 reads as a range of its own documents).
        """
        if kind == "message":
            return f"AND {id_column or alias + '.id'} BETWEEN ? AND ?", [self.first, self.last]
        return f"AND {alias}.end_at >= ? AND {alias}.start_at < ?", list(self.span)

    def mask(self, summaries: np.ndarray, items: np.ndarray) -> np.ndarray:
        """Which rows of a vector index fall in the window (``summaries``: the kind flags)."""
        messages = ~summaries & (items >= self.first) & (items <= self.last)
        if not self.summaries:
            return messages
        chosen = np.fromiter(self.summaries, dtype=np.int64, count=len(self.summaries))
        return messages | (summaries & np.isin(items, chosen))

    def as_dict(self) -> dict[str, Any]:
        return {"first_message": self.first, "last_message": self.last}
