"""``--longest-first`` (tests/support/longest_first.py), run by pytest itself on a small suite.

The suite's tests sleep for different times and print their order; a first run records the
durations, a second run must start with the longest and end with the shortest.
"""

from __future__ import annotations

import pytest

pytest_plugins = ["pytester"]

SUITE = """
import time

import pytest


@pytest.mark.parametrize("seconds", [0.02, 0.3, 0.15])
def test_sleeps(seconds):
    print(f"ran {seconds}")
    time.sleep(seconds)
"""


def run_order(pytester: pytest.Pytester, *args: str) -> list[str]:
    result = pytester.runpytest("-p", "support.longest_first", "-s", *args)
    result.assert_outcomes(passed=3)
    return [line.split()[-1] for line in result.outlines if "ran " in line]


def test_the_second_run_starts_with_the_longest(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_suite=SUITE)
    assert run_order(pytester, "--longest-first") == ["0.02", "0.3", "0.15"]
    assert run_order(pytester, "--longest-first") == ["0.3", "0.15", "0.02"]


def test_without_the_option_nothing_is_recorded_or_reordered(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_suite=SUITE)
    assert run_order(pytester) == ["0.02", "0.3", "0.15"]
    assert run_order(pytester, "--longest-first") == ["0.02", "0.3", "0.15"]


def test_a_new_test_runs_before_the_recorded_ones(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_suite=SUITE)
    run_order(pytester, "--longest-first")
    pytester.makepyfile(test_suite=SUITE.replace("0.15]", "0.15, 0.08]"))
    result = pytester.runpytest("-p", "support.longest_first", "-s", "--longest-first")
    result.assert_outcomes(passed=4)
    order = [line.split()[-1] for line in result.outlines if "ran " in line]
    assert order == ["0.08", "0.3", "0.15", "0.02"]
