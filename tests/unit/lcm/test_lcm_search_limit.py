"""``lcm_search``'s ``limit`` comes from the model: it is clamped like ``lcm_grep``'s, so no
value makes one search read an unbounded number of candidates or return an unbounded answer."""

from __future__ import annotations

import json

import pytest

from hermes_runtime.lcm.engine.lcmengine import LcmEngine
from hermes_runtime.lcm.search.textsearch import MAX_RESULTS


@pytest.fixture
def walruses(engine: LcmEngine) -> LcmEngine:
    """More matching messages than any search may return."""
    messages = [
        {"role": "user", "content": f"walrus sighting number {n} near buoy{n}"}
        for n in range(MAX_RESULTS + 60)
    ]
    engine.ingest("s", messages)
    return engine


@pytest.mark.parametrize(
    ("limit", "expected"), [(10**9, MAX_RESULTS), (MAX_RESULTS + 1, MAX_RESULTS), (0, 1), (-7, 1)]
)
def test_lcm_search_clamps_its_limit_like_lcm_grep(
    walruses: LcmEngine, limit: int, expected: int
) -> None:
    for tool in ("lcm_search", "lcm_grep"):
        answer = json.loads(walruses.handle_tool(tool, {"query": "walrus", "limit": limit}, "s"))
        assert "error" not in answer, answer
        assert len(answer["results"]) == expected, (tool, limit)
