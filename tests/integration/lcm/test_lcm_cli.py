"""`hermes-runtime lcm ...` end to end, as an operator runs it (subprocesses, real files)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import apsw
from fakes.fixtures import FakeLLM
from support.lcm_conversations import simple_conversation, tool_turn


def cli(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "hermes_runtime", "lcm", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def ok(*args: str | Path) -> Any:
    done = cli(*args, "--json")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def write_jsonl(path: Path, messages: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(m) + "\n" for m in messages))
    return path


def test_import_context_grep_search_expand_stats_doctor(tmp_path: Path) -> None:
    db = tmp_path / "data" / "lcm.db"
    messages = simple_conversation(60) + tool_turn(99, "fetch", ["payload " * 4_000])
    jsonl = write_jsonl(tmp_path / "chat.jsonl", messages)
    imported = ok("import", "--db", db, "--session", "chat", jsonl, "--budget", "3000")
    assert imported["messages"] == len(messages) and imported["summaries_created"] >= 1

    context = ok("context", "--db", db, "--session", "chat", "--budget", "2500")
    assert context["tokens"] <= 2500 and context["messages"]

    grep = ok("grep", "--db", db, "topic7")["results"]
    hit = next(h for h in grep if h["kind"] == "message")
    assert ok("expand", "--db", db, hit["id"])["message"] == messages[hit["seq"] - 1]

    search = ok("search", "--db", db, "--session", "chat", "question about topic12")["results"]
    assert any("topic12" in h["snippet"] for h in search[:5])

    summary = ok("expand", "--db", db, "sum_1", "--limit", "3")
    assert summary["total_sources"] >= 3 and summary["next_offset"] == 3

    output_id = ok("grep", "--db", db, "--regex", "externalized tool output")["results"][0]
    full = ok("expand", "--db", db, output_id["id"])["message"]["content"]
    assert full == "payload " * 4_000

    stats = ok("stats", "--db", db)
    assert stats["messages"] == len(messages) and stats["outputs"] == 1
    doctor = ok("doctor", "--db", db)
    assert doctor["ok"] is True and doctor["checks"]["messages_fts"] == "ok"


def test_import_uses_the_llm_when_given(tmp_path: Path, fake_llm: FakeLLM) -> None:
    db = tmp_path / "lcm.db"
    jsonl = write_jsonl(tmp_path / "chat.jsonl", simple_conversation(40))
    ok("import", "--db", db, "--session", "c", jsonl, "--budget", "1500",
       "--llm-base-url", fake_llm.base_url, "--llm-model", "fake-model")  # fmt: skip
    assert any("summar" in r["messages"][0]["content"].lower() for r in fake_llm.requests())
    assert "1" in ok("stats", "--db", db)["summaries_by_escalation_level"]


def test_bad_jsonl_line_is_named_and_nothing_is_stored(tmp_path: Path) -> None:
    db = tmp_path / "lcm.db"
    jsonl = tmp_path / "bad.jsonl"
    jsonl.write_text('{"role": "user", "content": "fine"}\n{"role": "robot"}\n')
    done = cli("import", "--db", db, "--session", "s", jsonl)
    assert done.returncode == 1
    assert f"{jsonl}:2" in done.stderr and "role" in done.stderr
    assert not db.exists()


def nested(depth: int) -> str:
    """A message whose content nests ``depth - 1`` arrays (the message itself is level 1)."""
    return '{"role": "user", "content": ' + "[" * (depth - 1) + "]" * (depth - 1) + "}"


def test_deeply_nested_line_is_named_and_nothing_is_stored(tmp_path: Path) -> None:
    """Python's parser dies with RecursionError on such a line; the import must refuse it."""
    db = tmp_path / "lcm.db"
    jsonl = tmp_path / "deep.jsonl"
    for depth in (100_000, 65):
        jsonl.write_text('{"role": "user", "content": "fine"}\n' + nested(depth) + "\n")
        done = cli("import", "--db", db, "--session", "s", jsonl)
        assert done.returncode == 1, done.stderr
        assert f"{jsonl}:2: JSON nested deeper than 64 levels" in done.stderr, done.stderr
        assert "unexpected" not in done.stderr and "Traceback" not in done.stderr
        assert not db.exists()
    jsonl.write_text(nested(64) + "\n")
    assert ok("import", "--db", db, "--session", "s", jsonl)["messages"] == 1


def test_deeply_nested_tool_calls_in_hermes_state_stay_text(tmp_path: Path) -> None:
    from hermes_state import SessionDB

    state = SessionDB(tmp_path / "state.db")
    state.create_session("deep", source="cli")
    state.append_message("deep", "user", "before the deep one")
    state.append_message("deep", "assistant", "calling", tool_calls=[{"id": "c1"}])
    state.close()
    raw = "[" * 100_000 + "]" * 100_000
    with apsw.Connection(str(tmp_path / "state.db")) as conn:
        conn.execute("UPDATE messages SET tool_calls = ? WHERE role = 'assistant'", (raw,))
    db = tmp_path / "lcm.db"
    imported = ok("import", "--db", db, "--hermes-state", tmp_path / "state.db")
    assert imported["sessions"] == ["deep"] and imported["messages"] == 2
    context = ok("context", "--db", db, "--session", "deep", "--budget", "500000")["messages"]
    assert "tool_calls" not in context[1]
    assert context[1]["content"].startswith("calling\n[tool calls: [[[")


def test_usage_errors_and_missing_database(tmp_path: Path) -> None:
    assert cli("grep", "--db", tmp_path / "none.db", "x").returncode == 1
    assert "none.db" in cli("grep", "--db", tmp_path / "none.db", "x").stderr
    assert cli("context", "--db", tmp_path / "x.db").returncode == 2
    assert cli("import", "--db", tmp_path / "x.db").returncode == 2  # neither FILE nor state
    jsonl = write_jsonl(tmp_path / "c.jsonl", [{"role": "user", "content": "hi"}])
    no_session = cli("import", "--db", tmp_path / "x.db", jsonl)
    assert no_session.returncode == 2 and "--session" in no_session.stderr
    both = cli("import", "--db", tmp_path / "x.db", "--hermes-state", jsonl, jsonl)
    assert both.returncode == 2 and "not allowed with" in both.stderr
    assert not (tmp_path / "x.db").exists()


def test_import_from_hermes_state_db(tmp_path: Path) -> None:
    from hermes_state import SessionDB

    state = SessionDB(tmp_path / "state.db")
    state.create_session("old-1", source="cli")
    state.append_message("old-1", "user", "the ferry leaves at 07:40 from pier nine")
    calls = [{"id": "c1", "type": "function", "function": {"name": "t", "arguments": "{}"}}]
    state.append_message("old-1", "assistant", None, tool_calls=calls)
    state.append_message("old-1", "tool", "timetable ok", tool_call_id="c1", tool_name="t")
    state.append_message("old-1", "assistant", "noted")
    state.create_session("old-2", source="cli")
    state.append_message("old-2", "user", "second session")
    state.close()
    db = tmp_path / "lcm.db"
    first = ok("import", "--db", db, "--hermes-state", tmp_path / "state.db")
    assert sorted(first["sessions"]) == ["old-1", "old-2"] and first["messages"] == 5
    again = ok("import", "--db", db, "--hermes-state", tmp_path / "state.db")
    assert again["messages"] == 0 and sorted(again["skipped_sessions"]) == ["old-1", "old-2"]
    hits = ok("grep", "--db", db, "ferry pier")["results"]
    assert hits[0]["session_id"] == "old-1"
    context = ok("context", "--db", db, "--session", "old-1", "--budget", "5000")["messages"]
    assert context[1]["tool_calls"] == calls


def test_doctor_fix_removes_old_orphans_and_reports_them(tmp_path: Path) -> None:
    db = tmp_path / "data" / "lcm.db"
    messages = tool_turn(1, "fetch", ["payload " * 4_000])
    ok("import", "--db", db, "--session", "chat", write_jsonl(tmp_path / "c.jsonl", messages))
    outputs = db.parent / "outputs"
    (referenced,) = [p for p in outputs.glob("*/*") if p.is_file()]
    old = outputs / "ab" / ("ab" + "5" * 62)
    young = outputs / "cd" / ("cd" + "6" * 62)
    for path, age in ((old, 7200), (young, 10), (referenced, 7200)):
        path.parent.mkdir(parents=True, exist_ok=True)
        if path is not referenced:
            path.write_text("no row points here")
        os.utime(path, (time.time() - age,) * 2)

    report = ok("doctor", "--db", db)  # without --fix: reported, nothing deleted
    assert sorted(report["checks"]["orphan_outputs"]) == [f"ab/{old.name}", f"cd/{young.name}"]
    assert "fixed" not in report and old.exists()

    fixed = ok("doctor", "--db", db, "--fix")
    assert fixed["fixed"]["removed"] == [f"ab/{old.name}"]
    assert fixed["fixed"]["kept_recent"] == [f"cd/{young.name}"]
    assert fixed["checks"]["orphan_outputs"] == [f"cd/{young.name}"]
    assert not old.exists() and young.exists() and referenced.exists()
    full = ok("expand", "--db", db, "msg_3")["message"]["content"]
    assert full == "payload " * 4_000

    text = cli("doctor", "--db", db, "--fix", "--grace-seconds", "0")
    assert text.returncode == 0, text.stderr
    assert f"removed orphan output cd/{young.name}" in text.stdout and not young.exists()
    bad = cli("doctor", "--db", db, "--fix", "--grace-seconds", "-1")
    assert bad.returncode == 2 and "--grace-seconds" in bad.stderr


def test_search_embeds_a_bounded_batch_and_reports_what_waits(tmp_path: Path) -> None:
    """An operator's search answers now, read-only; the agent's worker stores the backlog."""
    db = tmp_path / "lcm.db"
    jsonl = write_jsonl(tmp_path / "chat.jsonl", simple_conversation(20))
    ok("import", "--db", db, "--session", "chat", jsonl)
    queued = ok("stats", "--db", db)["embed_queue"]
    assert queued >= 20

    none = ok("search", "--db", db, "--mode", "vector", "--embed-pending", "0", "topic3")
    assert none["pending_embeddings"] == queued and none["results"] == []
    some = ok("search", "--db", db, "--mode", "vector", "--embed-pending", "5", "topic3")
    assert some["pending_embeddings"] == queued - 5 and len(some["results"]) == 5
    stats = ok("stats", "--db", db)
    assert stats["embeddings"] == 0 and stats["embed_queue"] == queued  # nothing was written

    bad = cli("search", "--db", db, "--embed-pending", "-1", "topic3")
    assert bad.returncode == 2 and "--embed-pending" in bad.stderr and "0 or more" in bad.stderr


def test_a_state_db_of_another_shape_is_refused_naming_the_missing_columns(
    tmp_path: Path,
) -> None:
    """Another Hermes wrote it (compat.state_db): nothing is imported from a table read wrongly."""
    state = tmp_path / "state.db"
    with apsw.Connection(str(state)) as conn:
        conn.execute(
            "CREATE TABLE messages (id INTEGER PRIMARY KEY, session_id TEXT, role TEXT, "
            "body TEXT, timestamp REAL)"
        )
        conn.execute("INSERT INTO messages VALUES (1, 's', 'user', 'hello', 1.0)")
    db = tmp_path / "lcm.db"
    done = cli("import", "--db", db, "--hermes-state", state)
    assert done.returncode == 1, done.stderr
    assert f"Hermes state database {state}: messages lacks content" in done.stderr
    assert "tool_call_id" in done.stderr and "Traceback" not in done.stderr
