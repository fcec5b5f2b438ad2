"""The refresher's status beside its file, and the agent's /metrics reading it (issue 30).

A real OpenBao dev server goes away while `run_refresh` keeps the file: the status says the
last refresh failed (naming the address), counts the failures, keeps the last success's time,
and the agent's metrics registry exports that; the server back, the next refresh is noted ok.
"""

from __future__ import annotations

import time
from pathlib import Path

from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families
from support.openbao import openbao_dev_server
from support.wait import wait_until
from vault_testlib import event_names, file_value, refresher

from hermes_runtime.agent import AgentMetrics
from hermes_runtime.vault import VaultSettings, read_refresh_status, refresh_status_path


def refresh_series(path: Path) -> dict[str, float]:
    text = generate_latest(AgentMetrics(secrets_refresh_status=path).registry).decode()
    return {
        sample.name: sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name.startswith("hermes_runtime_secrets_refresh")
    }


def test_an_outage_is_noted_beside_the_file_and_exported_by_the_agent(tmp_path: Path) -> None:
    out = tmp_path / "env"
    status_file = refresh_status_path(out)
    assert refresh_series(status_file) == {}  # no refresher, no series
    with openbao_dev_server() as server:
        port = int(server.addr.rsplit(":", 1)[1])
        server.client().secrets.kv.v2.create_or_update_secret(
            "hermes", secret={"KEY": "before"}, mount_point="secret"
        )
        settings = VaultSettings(addr=server.addr, auth="token", timeout=2)
        with refresher(settings, ["secret/data/hermes#KEY=K"], out, {"VAULT_TOKEN": "root"}) as log:
            # The status is noted after the file is written: wait for it, not for the file.
            wait_until(lambda: read_refresh_status(status_file) is not None, what="status noted")
            first = read_refresh_status(status_file)
            assert first is not None and first.last_attempt_ok, first
            assert refresh_series(status_file)["hermes_runtime_secrets_refresh_ok"] == 1
            server.stop()
            stopped_at = time.time()  # a refresh may still succeed between `first` and here
            wait_until(lambda: "vault.refresh.failed" in event_names(log), what="failure logged")
            wait_until(
                lambda: (
                    (s := read_refresh_status(status_file)) is not None and not s.last_attempt_ok
                ),
                what="the failure noted",
            )
            failed = read_refresh_status(status_file)
            assert failed is not None
            assert f"cannot reach Vault at {server.addr}" in failed.error, failed
            assert failed.failures_total >= 1
            # a failure never moves the last success: it is the last one before the stop
            assert first.last_success_timestamp <= failed.last_success_timestamp <= stopped_at
            assert file_value(out, "K") == "before"  # the last secrets kept
            series = refresh_series(status_file)
            assert series["hermes_runtime_secrets_refresh_ok"] == 0
            assert series["hermes_runtime_secrets_refresh_failures_total"] >= 1
            assert series["hermes_runtime_secrets_refresh_last_success_timestamp_seconds"] == (
                failed.last_success_timestamp
            )
            with openbao_dev_server(port=port) as restarted:
                restarted.client().secrets.kv.v2.create_or_update_secret(
                    "hermes", secret={"KEY": "after"}, mount_point="secret"
                )
                wait_until(lambda: file_value(out, "K") == "after", what="recovery")
                wait_until(
                    lambda: refresh_series(status_file)["hermes_runtime_secrets_refresh_ok"] == 1,
                    what="the recovery noted",
                )
    assert "before" not in status_file.read_text() and "after" not in status_file.read_text()
