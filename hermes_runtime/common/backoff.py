"""Exponential back-off with a cap and optional jitter: one small record, no retry loop.

Why a record and not a retry decorator (``tenacity``): the callers differ in what ends a
wait (a stop signal, a deadline, a crash window) and in what counts as an attempt; they only
need the same arithmetic. So this answers one question, "how long before attempt N", and the
caller keeps its loop::

    backoff = Backoff(first=0.2, cap=5.0)            # 0.2, 0.4, 0.8, ... 5.0, 5.0
    await asyncio.sleep(backoff.delay(attempt))

``jitter`` spreads retries of many clients that failed together (a server restart): with
``jitter=0.5`` each delay is drawn uniformly from ``[delay / 2, delay]``. A single process
retrying its own child (the agent's supervisor) wants none: its delays stay exact.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import dataclass


@dataclass(frozen=True)
class Backoff:
    """Delays ``first * factor**attempt``, at most ``cap``, each scaled by a random factor in
    ``[1 - jitter, 1]``. ``attempt`` counts from 0 (the first retry waits ``first``)."""

    first: float
    cap: float
    factor: float = 2.0
    jitter: float = 0.0

    def __post_init__(self) -> None:
        if not self.first >= 0:
            raise ValueError(f"Backoff.first must be >= 0 seconds, not {self.first}")
        if not self.cap >= self.first:
            raise ValueError(f"Backoff.cap ({self.cap}) must be >= first ({self.first})")
        if not self.factor >= 1:
            raise ValueError(f"Backoff.factor must be >= 1, not {self.factor}")
        if not 0 <= self.jitter <= 1:
            raise ValueError(f"Backoff.jitter must be within 0-1, not {self.jitter}")

    def delay(self, attempt: int, rng: random.Random | None = None) -> float:
        """Seconds to wait before retry number ``attempt`` (0, 1, 2, ...)."""
        if attempt < 0:
            raise ValueError(f"Backoff.delay: attempt must be >= 0, not {attempt}")
        try:
            base = min(self.cap, self.first * self.factor**attempt)
        except OverflowError:  # far past the cap
            base = self.cap
        if self.jitter == 0:
            return base
        draw = (rng or random).random()
        return base * (1 - self.jitter * draw)

    def delays(self, rng: random.Random | None = None) -> Iterator[float]:
        """The delays of attempts 0, 1, 2, ... without end (the caller decides when to stop)."""
        attempt = 0
        while True:
            yield self.delay(attempt, rng)
            attempt += 1
