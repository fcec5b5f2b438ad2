"""``--longest-first``: run the tests that took longest last time first, so workers end together.

Why: the e2e tier is scenarios of very different lengths on a few pytest-xdist workers. With
the collection's file order, the longest could start late and run alone at the end while the
other workers sat idle. Handing the longest scenarios out first (``--dist load``, which gives
each idle worker the next test in collection order) is the classic longest-processing-time
schedule.

Durations come from the previous run: the controller adds up each test's setup, call and
teardown and stores them in pytest's cache (``-o cache_dir=...`` keeps that cache beside the
images and the cluster in ``.cache``, so a fresh clone on a warm machine has them). A test with
no recorded duration (a new one, or the first run) goes first, in collection order: a new
scenario is more likely long than short. Without the option nothing is reordered or stored.
``tests/conftest.py`` loads this module as a plugin.
"""

from __future__ import annotations

from collections import defaultdict

import pytest

OPTION = "--longest-first"
CACHE_KEY = "hermes-runtime/durations"


def recorded_durations(config: pytest.Config) -> dict[str, float]:
    """Seconds per test node id from the last run that stored them (empty without a cache)."""
    cache = getattr(config, "cache", None)
    stored = cache.get(CACHE_KEY, {}) if cache is not None else {}
    return {str(k): float(v) for k, v in stored.items()} if isinstance(stored, dict) else {}


def longest_first(items: list[pytest.Item], durations: dict[str, float]) -> list[pytest.Item]:
    """Unknown tests first (stable), then by recorded duration, longest first (stable)."""
    unknown = [item for item in items if item.nodeid not in durations]
    known = [item for item in items if item.nodeid in durations]
    return unknown + sorted(known, key=lambda item: -durations[item.nodeid])


class _DurationRecorder:
    """Adds up the phases of each test in the controller and stores them at the end."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.seconds: dict[str, float] = defaultdict(float)

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        self.seconds[report.nodeid] += report.duration

    def pytest_sessionfinish(self) -> None:
        cache = getattr(self.config, "cache", None)
        if cache is None or not self.seconds:
            return
        merged = recorded_durations(self.config)
        merged.update({nodeid: round(s, 2) for nodeid, s in self.seconds.items()})
        cache.set(CACHE_KEY, merged)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        OPTION,
        action="store_true",
        default=False,
        help="order tests by their duration in the last run, longest first (with --dist load)",
    )


def pytest_configure(config: pytest.Config) -> None:
    if config.getoption("longest_first") and not hasattr(config, "workerinput"):
        config.pluginmanager.register(_DurationRecorder(config), "support-longest-first")


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if config.getoption("longest_first"):
        items[:] = longest_first(items, recorded_durations(config))
