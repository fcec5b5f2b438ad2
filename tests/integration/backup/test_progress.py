"""Progress: a bar on a terminal, one JSON object per line otherwise (CronJob logs)."""

from __future__ import annotations

import io
import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from backup_testlib import file_target, make_database, run_cli

from hermes_runtime.backup import create_backup, open_repository


def test_without_a_terminal_every_line_is_a_json_event(data_dir: Path, tmp_path: Path) -> None:
    target = file_target(tmp_path)
    result = run_cli("create", "--data-dir", str(data_dir), "--target", target.url)
    assert result.returncode == 0, result.stderr
    events = [json.loads(line) for line in result.stderr.splitlines()]
    names = [e["event"] for e in events]
    assert names[0] == "backup.create.started" and names[-1] == "backup.create.finished"
    assert sorted(e["path"] for e in events if e["event"] == "backup.create.database") == [
        "lcm.db",
        "state.db",
    ]
    assert all(isinstance(e["ts"], float) for e in events)


def test_a_long_backup_logs_progress_lines_with_growing_byte_counts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # restic's JSON status records: 10 a second since 0.19 (60 before); this short backup
    # needs more to show several.
    monkeypatch.setenv("RESTIC_PROGRESS_FPS", "60")
    data = tmp_path / "data"
    make_database(data / "big.db", 30_000, payload=400)  # > one 4 MiB chunk
    (data / "outputs").mkdir()
    (data / "outputs" / "report.bin").write_bytes(b"r" * (9 << 20))
    stream = io.StringIO()
    target = file_target(tmp_path)
    create_backup(data, open_repository(target.url), stream=stream, progress_every=0)
    events = [json.loads(line) for line in stream.getvalue().splitlines()]
    progress = [e for e in events if e["event"] == "backup.create.progress"]
    done = [e["bytes_done"] for e in progress]
    assert len(done) >= 4, events  # several chunks of the database and of the big file
    assert done == sorted(done) and done[0] > 0
    assert done[-1] >= (9 << 20) and progress[-1]["bytes_total"] >= (9 << 20)


def test_on_a_terminal_a_progress_bar_is_drawn_instead(data_dir: Path, tmp_path: Path) -> None:
    target = file_target(tmp_path)
    argv = ["backup", "create", "--data-dir", str(data_dir), "--target", target.url]
    cli = shlex.join([sys.executable, "-m", "hermes_runtime", *argv])
    # script(1) runs the CLI on a pseudo-terminal, as an operator's shell would.
    result = subprocess.run(
        ["script", "--quiet", "--return", "--command", cli, "/dev/null"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={
            "TERM": "xterm-256color",
            "COLUMNS": "120",
            "PATH": os.environ["PATH"],
            "HERMES_RUNTIME_RESTIC": os.environ["HERMES_RUNTIME_RESTIC"],  # the pinned build
            **target.env,
        },
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"backup {data_dir.name}" in result.stdout  # the bar's description
    assert "\x1b[" in result.stdout  # drawn with terminal control sequences
    assert '"event"' not in result.stdout  # no JSON lines for a person
