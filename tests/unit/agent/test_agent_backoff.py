"""``common.backoff.Backoff``: the arithmetic the supervisor's crash restarts use (and other
packages' retries may adopt). It lives in ``hermes_runtime/common``; tested here, beside its
first user."""

from __future__ import annotations

import random

import pytest

from hermes_runtime.common.backoff import Backoff


def test_delays_double_from_first_and_stop_at_the_cap() -> None:
    backoff = Backoff(first=0.2, cap=5.0)
    delays = backoff.delays()
    assert [round(next(delays), 3) for _ in range(7)] == [0.2, 0.4, 0.8, 1.6, 3.2, 5.0, 5.0]
    assert Backoff(first=1, cap=100, factor=3).delay(3) == 27
    assert backoff.delay(10_000) == 5.0  # far past the cap: no overflow


def test_jitter_draws_within_its_fraction_below_the_delay() -> None:
    backoff = Backoff(first=1.0, cap=8.0, jitter=0.5)
    rng = random.Random(7)
    draws = [backoff.delay(3, rng) for _ in range(200)]
    assert all(4.0 <= d <= 8.0 for d in draws)
    assert len(set(draws)) > 100  # spread, not one value
    assert Backoff(first=1.0, cap=8.0).delay(3, rng) == 8.0  # no jitter: exact


@pytest.mark.parametrize(
    ("fields", "named"),
    [
        ({"first": -1, "cap": 1}, "Backoff.first"),
        ({"first": 2, "cap": 1}, "Backoff.cap"),
        ({"first": 1, "cap": 2, "factor": 0.5}, "Backoff.factor"),
        ({"first": 1, "cap": 2, "jitter": 1.5}, "Backoff.jitter"),
    ],
)
def test_a_bad_field_is_refused_by_name(fields: dict[str, float], named: str) -> None:
    with pytest.raises(ValueError, match=named):
        Backoff(**fields)
    with pytest.raises(ValueError, match="attempt"):
        Backoff(first=1, cap=2).delay(-1)
