"""Poll until something is true, failing with what was awaited (tests never sleep blindly)."""

from __future__ import annotations

import time
from collections.abc import Callable


def wait_until(
    predicate: Callable[[], object],
    timeout: float = 20.0,
    what: str = "condition",
    interval: float = 0.1,
) -> None:
    """Call ``predicate`` every ``interval`` seconds until it is truthy; raise after ``timeout``."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(interval)
