"""The tiers that run in one pytest session name each test module once.

``make test`` collects tests/unit, tests/integration, tests/chart and tests/image together, and
those folders are not packages: pytest imports each test file (and the helper modules beside
them) under its bare name, so a second file of the same name anywhere in them fails the whole
collection ("import file mismatch") or imports the other folder's helper.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
ONE_SESSION = ("unit", "integration", "chart", "image")


def test_no_two_test_modules_of_one_session_share_a_name() -> None:
    places: dict[str, list[str]] = defaultdict(list)
    for tier in ONE_SESSION:
        for path in (TESTS / tier).rglob("*.py"):
            if path.name not in ("conftest.py", "__init__.py"):  # pytest's own, per folder
                places[path.name].append(str(path.relative_to(TESTS)))
    shared = {name: where for name, where in places.items() if len(where) > 1}
    assert shared == {}, shared
