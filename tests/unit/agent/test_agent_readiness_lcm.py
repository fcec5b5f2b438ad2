"""``/ready``'s LCM check reads the database the engine writes, where config.yaml puts it.

Real files and a real SQLite database; the check runs as the endpoint runs it (``checks``).
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from hermes_runtime.agent.endpoints import Readiness
from hermes_runtime.common.sqlite import connect


def lcm_verdict(home: Path) -> str:
    state = home / "state"
    state.mkdir(exist_ok=True)
    readiness = Readiness(home, state, ("127.0.0.1", 9), gateway_running=lambda: False)
    return asyncio.run(readiness.checks())["lcm"]


def select_lcm(home: Path, section: str = "") -> None:
    (home / "config.yaml").write_text("context:\n  engine: lcm\n" + section)


def test_a_moved_database_is_the_one_checked(tmp_path: Path) -> None:
    moved = tmp_path / "memory" / "agent.db"
    moved.parent.mkdir()
    select_lcm(tmp_path, f"lcm:\n  db_path: {moved}\n")
    assert lcm_verdict(tmp_path) == "ok"  # not made yet: the engine makes it at its first turn

    moved.write_bytes(b"this is no SQLite database, " * 100)
    (tmp_path / "lcm.db").write_bytes(b"")  # the default path, left over: not what is checked
    verdict = lcm_verdict(tmp_path)
    assert verdict.startswith(f"{moved}: ") and "database" in verdict

    moved.unlink()
    conn = connect(moved)
    conn.execute("CREATE TABLE t(x)")
    conn.close()
    assert lcm_verdict(tmp_path) == "ok"


def test_a_bad_lcm_section_is_named_and_another_engine_is_not_checked(tmp_path: Path) -> None:
    (tmp_path / "lcm.db").write_bytes(b"this is no SQLite database, " * 100)
    select_lcm(tmp_path, "lcm:\n  threshold_percent: 2\n")
    assert lcm_verdict(tmp_path).startswith("config.yaml lcm.threshold_percent: value 2")

    (tmp_path / "config.yaml").write_text("context:\n  engine: compressor\n")
    assert lcm_verdict(tmp_path) == "ok"
