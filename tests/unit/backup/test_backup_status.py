"""The backup status record on the data volume and its export on the agent's /metrics."""

from __future__ import annotations

import json
import os
import stat
import threading
from dataclasses import asdict
from pathlib import Path

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from hermes_runtime.agent import AgentMetrics
from hermes_runtime.backup import (
    BackupStatus,
    BackupSummary,
    backup_status_path,
    read_backup_status,
    record_backup_outcome,
)
from hermes_runtime.backup.selection import make_excluder
from hermes_runtime.backup.status import MAX_RECORD_BYTES
from hermes_runtime.common.errors import RuntimeFailure


def _summary(snapshot: str = "20261201T031700000Z-abc123", added: int = 4096) -> BackupSummary:
    return BackupSummary(
        id=snapshot,
        target="s3://bucket/agent",
        duration_seconds=2.5,
        bytes_read=10_000,
        bytes_uploaded=added,
        files=3,
        files_uploaded=1,
        files_unchanged=2,
        databases={"state.db": {"messages": 5}, "lcm.db": {"messages": 7}},
    )


def _scrape(metrics: AgentMetrics) -> dict[str, float]:
    text = generate_latest(metrics.registry).decode()
    return {
        s.name: s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name.startswith("hermes_backup_")
    }


def test_success_then_failure_keeps_the_last_success_and_counts_the_failure(
    tmp_path: Path,
) -> None:
    path = backup_status_path(tmp_path / "data")
    ok = record_backup_outcome(path, started_at=1000.0, summary=_summary(), now=1012.5)
    assert (ok.last_attempt_ok, ok.last_success_timestamp, ok.last_duration_seconds) == (
        True,
        1012.5,
        12.5,
    )
    assert ok.databases == ["lcm.db", "state.db"] and ok.bytes_added == 4096
    assert ok.failures_total == 0 and ok.error is None

    failed = record_backup_outcome(
        path, started_at=2000.0, summary=None, error="s3://b/p: unreachable", now=2003.0
    )
    assert failed.last_attempt_ok is False
    assert failed.error == "s3://b/p: unreachable"
    assert failed.last_attempt_timestamp == 2003.0 and failed.last_duration_seconds == 3.0
    assert failed.last_success_timestamp == 1012.5
    assert failed.snapshot == "20261201T031700000Z-abc123"
    assert failed.failures_total == 1
    again = record_backup_outcome(path, started_at=3000.0, summary=None, error="x", now=3001.0)
    assert again.failures_total == 2

    back = record_backup_outcome(path, started_at=4000.0, summary=_summary("s2", 7), now=4001.0)
    assert back.failures_total == 2, "the failure counter never goes down"
    assert back.error is None and back.snapshot == "s2"
    assert read_backup_status(path) == back
    assert [p.name for p in path.parent.iterdir()] == [path.name], "no temp file left"


def test_a_corrupt_record_is_named_on_read_and_replaced_on_write(tmp_path: Path) -> None:
    path = tmp_path / "backup-status.json"
    assert read_backup_status(path) is None
    path.write_text("{not json")
    with pytest.raises(RuntimeFailure, match=r"backup-status\.json"):
        read_backup_status(path)
    path.write_text(json.dumps({"format": 99}))
    with pytest.raises(RuntimeFailure, match="not a format-1"):
        read_backup_status(path)
    status = record_backup_outcome(path, started_at=1.0, summary=None, error="boom", now=2.0)
    assert status.failures_total == 1 and status.last_success_timestamp is None
    assert read_backup_status(path) == status


def test_the_status_file_stays_out_of_backups() -> None:
    excluder = make_excluder((), defaults=True)
    assert excluder.excluded(".hermes-runtime/backup-status.json", is_dir=False)
    assert not excluder.excluded(".hermes-runtime/seed.json", is_dir=False)


def test_agent_metrics_export_the_record_at_every_scrape(tmp_path: Path) -> None:
    path = tmp_path / "backup-status.json"
    metrics = AgentMetrics(backup_status_file=path)
    assert _scrape(metrics) == {}, "no record: no backup series (the alert covers absence)"

    record_backup_outcome(path, started_at=100.0, summary=_summary(added=4096), now=110.0)
    assert _scrape(metrics) == {
        "hermes_backup_last_attempt_timestamp_seconds": 110.0,
        "hermes_backup_last_success_timestamp_seconds": 110.0,
        "hermes_backup_last_run_success": 1.0,
        "hermes_backup_last_duration_seconds": 10.0,
        "hermes_backup_last_bytes_added": 4096.0,
        "hermes_backup_last_databases": 2.0,
        "hermes_backup_failures_total": 0.0,
    }
    record_backup_outcome(path, started_at=200.0, summary=None, error="boom", now=205.0)
    after = _scrape(metrics)  # the same registry: read at scrape time, not cached
    assert after["hermes_backup_last_run_success"] == 0.0
    assert after["hermes_backup_last_attempt_timestamp_seconds"] == 205.0
    assert after["hermes_backup_last_success_timestamp_seconds"] == 110.0
    assert after["hermes_backup_failures_total"] == 1.0

    path.write_text("garbage")
    assert _scrape(metrics) == {}, (
        "an unreadable record exports nothing rather than failing /metrics"
    )


def test_agent_metrics_without_a_status_file_have_no_backup_series() -> None:
    text = generate_latest(AgentMetrics().registry).decode()
    assert "hermes_runtime_uptime_seconds" in text
    assert "hermes_backup_" not in text


def _recorded(path: Path) -> BackupStatus:
    return record_backup_outcome(path, started_at=1.0, summary=None, error="boom", now=2.0)


def test_a_planted_link_is_neither_read_through_nor_written_through(tmp_path: Path) -> None:
    """The agent can write ``.hermes-runtime``; the backup that records there holds the keys."""
    outside = tmp_path / "outside.json"
    outside.write_text(json.dumps({"format": 1, "last_attempt_timestamp": 9.0,
                                   "last_attempt_ok": True, "last_duration_seconds": 1.0,
                                   "failures_total": 41}))  # fmt: skip
    before = outside.read_bytes()
    path = tmp_path / "state" / "backup-status.json"
    path.parent.mkdir()
    path.symlink_to(outside)
    with pytest.raises(RuntimeFailure, match="unreadable"):
        read_backup_status(path)
    assert _recorded(path).failures_total == 1, "the linked record's counter was read"
    assert not path.is_symlink() and outside.read_bytes() == before


def test_a_planted_fifo_is_refused_without_waiting(tmp_path: Path) -> None:
    path = tmp_path / "backup-status.json"
    os.mkfifo(path)
    done = threading.Event()
    thread = threading.Thread(target=lambda: (_recorded(path), done.set()), daemon=True)
    thread.start()
    assert done.wait(10), "recording waited on a FIFO (opened without O_NONBLOCK?)"
    assert stat.S_ISREG(path.lstat().st_mode)


def test_a_folder_swapped_for_a_link_gets_no_record_outside(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / ".hermes-runtime").symlink_to(outside)
    path = backup_status_path(tmp_path / "data")
    with pytest.raises(
        RuntimeFailure, match=r"\.hermes-runtime.*refused|refused.*\.hermes-runtime"
    ):
        _recorded(path)
    assert list(outside.iterdir()) == []


def test_a_huge_or_mistyped_record_is_refused_then_replaced(tmp_path: Path) -> None:
    path = tmp_path / "backup-status.json"
    path.write_bytes(b" " * (MAX_RECORD_BYTES + 1))
    with pytest.raises(RuntimeFailure, match="larger than"):
        read_backup_status(path)
    good = asdict(_recorded(path))
    path.write_text(json.dumps({**good, "failures_total": "many"}))
    with pytest.raises(RuntimeFailure, match="'failures_total' has the wrong type"):
        read_backup_status(path)
    assert _recorded(path).failures_total == 1  # replaced, not crashed on "many" + 1


def test_the_record_is_readable_by_the_agent_whatever_the_umask(tmp_path: Path) -> None:
    path = tmp_path / "backup-status.json"
    previous = os.umask(0o077)
    try:
        _recorded(path)
    finally:
        os.umask(previous)
    assert stat.S_IMODE(path.stat().st_mode) == 0o644
