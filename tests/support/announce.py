"""Lines a test shows on the terminal even when it passes, from any pytest-xdist worker.

Why not ``print`` or the terminal reporter: a passing test's output is captured, and an xdist
worker's terminal is not shown at all (`make e2e` runs the scenarios with ``-n``). A test
records its line in its own report (``user_properties``), which xdist sends to the controller
like every report; the plugin below writes it there, or in the only process without ``-n``.
``tests/conftest.py`` loads this module as a plugin.
"""

from __future__ import annotations

import pytest

KEY = "announce"


def announce(item: pytest.Item, text: str) -> None:
    """Show ``text`` on the terminal once the test (or the fixture running for it) is done."""
    item.user_properties.append((KEY, text))


class _Announcer:
    """Writes each announced line once (a module fixture's line comes with every test)."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.shown: set[str] = set()

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.when != "teardown":  # the last report of a test holds every line
            return
        reporter = self.config.pluginmanager.get_plugin("terminalreporter")
        for key, text in report.user_properties:
            if key != KEY or text in self.shown:
                continue
            self.shown.add(str(text))
            if reporter is not None:
                reporter.write_line(str(text))


def pytest_configure(config: pytest.Config) -> None:
    if not hasattr(config, "workerinput"):  # the controller, or a run without -n
        config.pluginmanager.register(_Announcer(config), "support-announce")
