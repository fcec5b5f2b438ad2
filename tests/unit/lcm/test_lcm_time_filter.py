"""Time-filtered recall: ``since``/``until`` on lcm_search and lcm_grep, on real SQLite.

The window is applied inside each ranking, before its top results are taken: many older
matches that rank above the one message of the window must not crowd it out.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator

import pytest

from hermes_runtime.common.errors import RuntimeFailure
from hermes_runtime.lcm.config import LcmConfig
from hermes_runtime.lcm.embed.embedbatch import embed_all
from hermes_runtime.lcm.embed.embedders import StaticModelEmbedder
from hermes_runtime.lcm.engine.lcmengine import LcmEngine
from hermes_runtime.lcm.search.hybrid import hybrid_search
from hermes_runtime.lcm.search.textsearch import grep
from hermes_runtime.lcm.store.timewindow import TimeWindow, parse_instant

DAY = 86_400.0
NOW = time.time()
# More older matches than a ranking reads (hybrid search: 600 candidates at most for a few
# results): filtered after its top candidates, the window's one message would never be seen.
OLD_DECISIONS = 700


@pytest.fixture(scope="module")
def history(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LcmEngine]:
    """A month-old debate about the database (many matches), then last week's decision.

    Shared by the module's tests, which only read it.
    """
    config = LcmConfig.for_home(tmp_path_factory.mktemp("history"), {"embeddings": "off"})
    engine = LcmEngine(config, embedder=StaticModelEmbedder())
    old = [
        {"role": "user", "content": f"database decision draft {i}: database decision pending"}
        for i in range(OLD_DECISIONS)
    ]
    engine.store.ingest_many("talk", old, created_at=NOW - 30 * DAY)
    recent = [{"role": "user", "content": "we settled the database question: postgres it is"}]
    engine.store.ingest_many("talk", recent, created_at=NOW - 3 * DAY)
    engine.store.ingest_many(
        "talk", [{"role": "user", "content": "unrelated chat about lunch"}], created_at=NOW
    )
    embed_all(engine.store, engine.embedder)  # type: ignore[arg-type]
    yield engine
    engine.close()


def snippets(answer: str) -> list[str]:
    return [hit["snippet"] for hit in json.loads(answer)["results"]]


def test_search_keeps_to_the_window_before_its_top_results(history: LcmEngine) -> None:
    question = {"query": "database decision", "scope": "all", "limit": 1}
    unfiltered = snippets(history.handle_tool("lcm_search", question, "talk"))
    assert "postgres" not in unfiltered[0], "older matches rank first without a window"
    last_week = snippets(history.handle_tool("lcm_search", {**question, "since": "7d"}, "talk"))
    assert last_week == ["we settled the database question: postgres it is"]
    before = history.handle_tool("lcm_search", {**question, "limit": 50, "until": "7d"}, "talk")
    assert len(snippets(before)) == 50
    assert all("postgres" not in s and "lunch" not in s for s in snippets(before))


def test_both_rankings_filter_in_the_query(history: LcmEngine) -> None:
    window = TimeWindow(since=NOW - 7 * DAY, until=NOW - DAY).ids(history.store)
    for mode in ("fts", "vector"):
        hits = hybrid_search(
            history.store,
            history.embedder,
            "database decision postgres",
            limit=5,
            mode=mode,
            index=history.vectors,
            window=window,
        )
        assert [h.snippet for h in hits] == ["we settled the database question: postgres it is"]


def test_grep_and_regex_grep_take_the_window(history: LcmEngine) -> None:
    answer = history.handle_tool("lcm_grep", {"query": "database", "since": "7d"}, "talk")
    assert snippets(answer) and all("postgres" in s for s in snippets(answer))
    window = TimeWindow(until=NOW - 7 * DAY).ids(history.store)
    assert len(grep(history.store, r"draft \d+", regex=True, limit=200, window=window)) == 200
    assert grep(history.store, "postgres", window=window) == []
    recent = TimeWindow(since=NOW - 7 * DAY).ids(history.store)
    assert grep(history.store, r"draft \d+", regex=True, window=recent) == []
    found = grep(history.store, "database", limit=1, window=recent)
    assert len(found) == 1 and "postgres" in found[0].snippet


def test_dates_datetimes_and_ages_parse() -> None:
    midnight = 1_764_460_800.0  # 2025-11-30T00:00:00Z
    assert parse_instant("since", "2025-11-30", NOW) == midnight
    assert parse_instant("until", "2025-11-30", NOW, end_of_day=True) == midnight + DAY
    assert parse_instant("since", "2025-11-30T14:00Z", NOW) == midnight + 14 * 3600
    assert parse_instant("since", "2025-11-30T14:00+02:00", NOW) == midnight + 12 * 3600
    assert parse_instant("since", "2025-11-30T14:00:00", NOW) == midnight + 14 * 3600
    assert parse_instant("since", "7d", NOW) == NOW - 7 * DAY
    assert parse_instant("since", "36h", NOW) == NOW - 36 * 3600
    assert parse_instant("since", "2w", NOW) == NOW - 14 * DAY


@pytest.mark.parametrize("bad", ["last week", "7 days", "2025-13-01", " ", "yesterday", 7])
def test_a_bad_time_is_an_error_naming_the_parameter(history: LcmEngine, bad: object) -> None:
    with pytest.raises(RuntimeFailure, match="lcm_search: since: expected an ISO 8601"):
        TimeWindow.from_args("lcm_search", {"since": bad, "until": "1d"})
    answer = json.loads(history.handle_tool("lcm_grep", {"query": "x", "until": bad}, "talk"))
    assert answer["error"].startswith("lcm_grep: until: expected"), answer


def test_an_empty_or_missing_time_is_no_filter() -> None:
    assert TimeWindow.from_args("lcm_search", {"since": "", "until": None}) is None
    assert TimeWindow.from_args("lcm_search", {}) is None


def test_since_after_until_is_refused(history: LcmEngine) -> None:
    args = {"query": "database", "since": "1d", "until": "7d"}
    answer = json.loads(history.handle_tool("lcm_search", args, "talk"))
    assert answer["error"] == "lcm_search: since ('1d') must be before until ('7d')"


def test_a_window_of_an_empty_history_finds_nothing(engine: LcmEngine) -> None:
    window = TimeWindow(since=NOW - DAY).ids(engine.store)
    assert window.first > window.last
    assert json.loads(engine.handle_tool("lcm_search", {"query": "x", "since": "1d"}, "s")) == {
        "results": []
    }
