"""`create --status-file`: the outcome on the data volume, scraped from a served /metrics."""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path

from backup_testlib import BackupTarget, create_json, run_cli
from prometheus_client import start_http_server
from prometheus_client.parser import text_string_to_metric_families

from hermes_runtime.agent import AgentMetrics

STATUS = ".hermes-runtime/backup-status.json"


def _scrape(port: int) -> dict[str, float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        text = response.read().decode()
    return {
        s.name: s.value
        for f in text_string_to_metric_families(text)
        for s in f.samples
        if s.name.startswith("hermes_backup_")
    }


def test_outcomes_reach_the_agent_metrics_and_the_record_is_not_backed_up(
    target: BackupTarget, data_dir: Path, tmp_path: Path
) -> None:
    status = data_dir / STATUS
    # prometheus_client's own server on the agent's registry: what /metrics serves.
    metrics = AgentMetrics(backup_status_file=status)
    server, _thread = start_http_server(0, addr="127.0.0.1", registry=metrics.registry)
    port = server.server_port
    try:
        assert _scrape(port) == {}
        first = create_json(target, data_dir, "--status-file", str(status))
        record = json.loads(status.read_text())
        assert record["snapshot"] == first["id"]
        assert record["bytes_added"] == first["bytes_uploaded"] > 0
        assert record["databases"] == ["lcm.db", "state.db"]
        ok = _scrape(port)
        assert ok["hermes_backup_last_run_success"] == 1
        assert ok["hermes_backup_last_bytes_added"] == first["bytes_uploaded"]
        assert ok["hermes_backup_failures_total"] == 0

        failed = run_cli(
            "create",
            "--data-dir",
            str(tmp_path / "missing"),
            "--target",
            target.url,
            "--status-file",
            str(status),
            env=target.env,
        )
        assert failed.returncode == 1
        assert "missing" in json.loads(status.read_text())["error"]
        after = _scrape(port)
        assert after["hermes_backup_last_run_success"] == 0
        assert after["hermes_backup_failures_total"] == 1
        assert (
            after["hermes_backup_last_success_timestamp_seconds"]
            == (ok["hermes_backup_last_success_timestamp_seconds"])
        )
        assert (
            after["hermes_backup_last_attempt_timestamp_seconds"]
            > (ok["hermes_backup_last_attempt_timestamp_seconds"])
        )
    finally:
        server.shutdown()

    # The data dir now holds a status record: it must stay out of the snapshot.
    second = create_json(target, data_dir, "--status-file", str(status))
    restored = tmp_path / "restored"
    result = run_cli(
        "restore",
        "--target",
        target.url,
        "--snapshot",
        second["id"],
        "--data-dir",
        str(restored),
        env=target.env,
    )
    assert result.returncode == 0, result.stderr
    assert (restored / "SOUL.md").exists()
    assert not (restored / STATUS).exists(), "another volume's history must not come back"
