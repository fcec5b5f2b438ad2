"""``lcm_grep regex=true`` runs in linear time (RE2): no pattern the model sends can hang it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from hermes_runtime.common.errors import RuntimeFailure
from hermes_runtime.lcm.config import LcmConfig
from hermes_runtime.lcm.engine.lcmengine import LcmEngine

# With Python's backtracking `re`, `(a+)+$` against 40 `a` then `b` takes about 2**40 steps.
EVIL = "(a+)+$"
RUN_OF_A = "a" * 40


def _engine(home: Path) -> LcmEngine:
    return LcmEngine(LcmConfig.for_home(home, {"embeddings": "off"}))


def test_catastrophic_pattern_returns_the_right_messages(tmp_path: Path) -> None:
    """Run in a child with a generous timeout: a hang is a failure, not a stuck test run."""
    engine = _engine(tmp_path)
    engine.ingest("s", [{"role": "user", "content": f"{RUN_OF_A}{n}b"} for n in range(200)])
    engine.ingest("s", [{"role": "assistant", "content": f"ends in a run {RUN_OF_A}"}])
    db = engine.store.db_path
    engine.close()
    command = [sys.executable, "-m", "hermes_runtime", "lcm", "grep", "--db", str(db)]
    done = subprocess.run(
        [*command, "--regex", EVIL, "--json"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    hits = json.loads(done.stdout)["results"]
    assert [h["snippet"] for h in hits] == [f"ends in a run {RUN_OF_A}"]


def test_ordinary_patterns_match_as_before(tmp_path: Path) -> None:
    engine = _engine(tmp_path)
    try:
        engine.ingest(
            "s",
            [
                {"role": "user", "content": "order PELICAN-42 shipped"},
                {"role": "assistant", "content": "pelican-7 is lower case"},
                {"role": "user", "content": "nothing here"},
            ],
        )
        exact = engine.handle_tool("lcm_grep", {"query": r"PELICAN-\d+", "regex": True}, "s")
        assert [h["snippet"] for h in json.loads(exact)["results"]] == ["order PELICAN-42 shipped"]
        folded = engine.handle_tool("lcm_grep", {"query": r"(?i)^pelican-\d\b", "regex": True}, "s")
        assert [h["snippet"] for h in json.loads(folded)["results"]] == ["pelican-7 is lower case"]
    finally:
        engine.close()


@pytest.mark.parametrize("pattern", [r"(a)\1", r"foo(?=bar)", r"(?<!x)y", r"(?!a)b"])
def test_backreferences_and_lookaround_are_refused_by_name(tmp_path: Path, pattern: str) -> None:
    engine = _engine(tmp_path)
    try:
        engine.ingest("s", [{"role": "user", "content": "aa foobar y b"}])
        answer = json.loads(engine.handle_tool("lcm_grep", {"query": pattern, "regex": True}, "s"))
        assert "results" not in answer
        assert repr(pattern) in answer["error"] and "not supported" in answer["error"]
        assert "backreferences" in answer["error"] and "lookahead" in answer["error"]
    finally:
        engine.close()


def test_invalid_pattern_is_named(tmp_path: Path) -> None:
    from hermes_runtime.lcm.search.textsearch import grep

    engine = _engine(tmp_path)
    try:
        with pytest.raises(RuntimeFailure, match=r"invalid regular expression '\(unclosed'"):
            grep(engine.store, "(unclosed", regex=True)
    finally:
        engine.close()
