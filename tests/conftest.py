"""Shared test setup. Each capability keeps its own fixtures in its test folder.

Where test code lives, one rule per kind:

- fixtures of one folder: its ``conftest.py``; fixtures and hooks several tiers
  use: a module listed in ``pytest_plugins`` below (tests ask for fixtures by
  name; no re-exporting imports); ``support.announce`` puts a passing test's
  line on the terminal, with or without pytest-xdist; ``support.isolation``
  gives each test process its own TMPDIR; ``support.longest_first`` orders a
  tier by last run's durations (``--longest-first``, the e2e tier);
- helpers of one folder: ``<area>_testlib.py`` beside its tests (e.g.
  ``plugins_testlib.py``); helpers several tiers use: ``tests/support/<topic>.py``
  (``support.cli``, ``support.seaweedfs``...);
- stand-ins for servers a user would not run: ``tests/fakes`` (only the LLM);
- programs a test starts as a subprocess are named for their role
  (``hermes_driver.py``, ``ledger_writer.py``).

``tests/`` is on ``sys.path`` because this file lives there (pytest's rootdir
conftest), so ``support.*`` and ``fakes.*`` import without path edits.
"""

from __future__ import annotations

import pytest

pytest_plugins = [
    "fakes.fixtures",
    "support.announce",
    "support.isolation",
    "support.longest_first",
]


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--kube-config",
        dest="kube_config",
        default=None,
        help="kubeconfig for the e2e tier (default: $KUBECONFIG, else the local cluster's)",
    )
