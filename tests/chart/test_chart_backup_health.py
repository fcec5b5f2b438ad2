"""Backup scratch volume, the status record, and the PrometheusRule tested with real promtool."""

from __future__ import annotations

import json
import shutil
import subprocess
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml
from chart_testlib import (
    CHART,
    FULLNAME,
    NAMESPACE,
    RELEASE,
    REPO,
    env_map,
    render,
    render_error,
    run_helm,
)

RULE_API = "monitoring.coreos.com/v1/PrometheusRule"
SIDECAR_RWOP = {
    "backup": {"mode": "sidecar"},
    "persistence": {"accessModes": ["ReadWriteOncePod"]},
}


def _cron_pod(values: dict | None = None) -> dict:
    return render(values).one("CronJob")["spec"]["jobTemplate"]["spec"]["template"]["spec"]


def _scratch_claim(pod: dict) -> dict:
    volumes = {v["name"]: v for v in pod["volumes"]}
    return volumes["backup-scratch"]["ephemeral"]["volumeClaimTemplate"]["spec"]


def test_cronjob_snapshots_to_an_ephemeral_volume_sized_like_the_data_volume() -> None:
    pod = _cron_pod({"persistence": {"size": "37Gi", "storageClass": "fast"}})
    claim = _scratch_claim(pod)
    assert claim["resources"]["requests"]["storage"] == "37Gi"
    assert claim["storageClassName"] == "fast"
    container = pod["containers"][0]
    assert {"name": "backup-scratch", "mountPath": "/scratch"} in container["volumeMounts"]
    script = container["args"][2]  # the image entrypoint (catatonit) stays PID 1
    assert env_map(container)["BACKUP_WORK_DIR"] == "/scratch"
    assert '--work-dir "$BACKUP_WORK_DIR"' in script
    assert '--status-file "$HERMES_HOME/.hermes-runtime/backup-status.json"' in script


def test_scratch_size_and_class_can_be_set() -> None:
    claim = _scratch_claim(
        _cron_pod({"backup": {"scratch": {"size": "5Gi", "storageClass": "scratch-ssd"}}})
    )
    assert claim["resources"]["requests"]["storage"] == "5Gi"
    assert claim["storageClassName"] == "scratch-ssd"
    assert "storageClassName" not in _scratch_claim(_cron_pod())


def test_sidecar_mode_mounts_the_scratch_volume_in_the_agent_pod() -> None:
    manifest = render(SIDECAR_RWOP)
    assert not manifest.has("CronJob")
    pod = manifest.agent_pod
    assert _scratch_claim(pod)["resources"]["requests"]["storage"] == "10Gi"
    backup = manifest.container("backup")
    assert {"name": "backup-scratch", "mountPath": "/scratch"} in backup["volumeMounts"]
    assert env_map(backup)["BACKUP_WORK_DIR"] == "/scratch"
    # In cronjob mode the agent pod carries no scratch volume: only the job needs it.
    assert "backup-scratch" not in {v["name"] for v in render().agent_pod["volumes"]}


def test_schema_refuses_a_bad_scratch_size() -> None:
    error = render_error({"backup": {"scratch": {"size": "lots"}}})
    assert "backup.scratch.size" in error or "/backup/scratch/size" in error, error


def _render_rule(values: Mapping[str, Any] | None = None, api: bool = True) -> list[dict]:
    args = ["template", RELEASE, str(CHART), "--namespace", NAMESPACE]
    args += ["--show-only", "templates/prometheusrule.yaml"]
    if api:
        args += ["--api-versions", RULE_API]
    with tempfile.TemporaryDirectory(prefix="chart-values-") as scratch:
        path = Path(scratch) / "values.json"
        path.write_text(json.dumps(values or {}), encoding="utf-8")
        result = run_helm([*args, "-f", str(path)])
    if result.returncode != 0 and "could not find template" in result.stderr:
        return []  # --show-only of a template that rendered nothing
    assert result.returncode == 0, result.stderr
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc]


def test_prometheus_rule_only_when_the_cluster_serves_the_api() -> None:
    assert _render_rule(api=False) == []
    assert _render_rule({"backup": {"prometheusRule": {"enabled": False}}}) == []
    assert _render_rule({"metrics": {"enabled": False}}) == []
    (rule,) = _render_rule({"backup": {"prometheusRule": {"labels": {"release": "kps"}}}})
    assert rule["kind"] == "PrometheusRule"
    assert rule["metadata"]["labels"]["release"] == "kps"
    alerts = [r["alert"] for g in rule["spec"]["groups"] for r in g["rules"]]
    assert alerts == ["HermesBackupMissing", "HermesBackupFailed"]


@pytest.fixture(scope="module")
def promtool() -> str:
    """Debian's promtool (package `prometheus` 2.42), installed like every system package."""
    if shutil.which("promtool") is None:
        subprocess.run([str(REPO / "ci" / "install-system-deps.sh")], check=True)
    found = shutil.which("promtool")
    assert found, "promtool missing after ci/install-system-deps.sh (Debian package prometheus)"
    return found


AGENT = {"job": FULLNAME, "namespace": NAMESPACE, "pod": f"{FULLNAME}-0"}
OTHER = {"job": "another-agent", "namespace": NAMESPACE, "pod": "another-agent-0"}


def _series(name: str, labels: Mapping[str, str], values: str) -> dict[str, str]:
    matchers = ",".join(f'{k}="{v}"' for k, v in labels.items())
    return {"series": f"{name}{{{matchers}}}", "values": values}


def _alert(rule: dict, labels: Mapping[str, str]) -> dict[str, Any]:
    def expand(text: str) -> str:
        for key, value in labels.items():
            text = text.replace(f"{{{{ $labels.{key} }}}}", value)
        return text

    return {
        "exp_labels": {**labels, **rule["labels"]},
        "exp_annotations": {k: expand(v) for k, v in rule["annotations"].items()},
    }


def _rule_tests(rules: dict[str, dict]) -> list[dict]:
    """Series that must fire and must not, with backup.interval=3600 (alert after 7200 s)."""
    uptime = _series("hermes_runtime_uptime_seconds", AGENT, "0+60x300")
    missing, failed = rules["HermesBackupMissing"], rules["HermesBackupFailed"]

    def at(minutes: int, alert: str, fired: list[dict]) -> dict:
        return {"eval_time": f"{minutes}m", "alertname": alert, "exp_alerts": fired}

    return [
        {  # healthy: a success every minute, never a failure
            "interval": "1m",
            "input_series": [
                uptime,
                _series("hermes_backup_last_success_timestamp_seconds", AGENT, "0+60x300"),
                _series("hermes_backup_last_run_success", AGENT, "1x300"),
            ],
            "alert_rule_test": [
                at(290, "HermesBackupMissing", []),
                at(290, "HermesBackupFailed", []),
            ],
        },
        {  # stalled: the last success at t=0 and no run since (the job never scheduled)
            "interval": "1m",
            "input_series": [
                uptime,
                _series("hermes_backup_last_success_timestamp_seconds", AGENT, "0x300"),
                _series("hermes_backup_last_run_success", AGENT, "1x300"),
                # another agent's stalled series must not fire for this release
                _series("hermes_backup_last_success_timestamp_seconds", OTHER, "0x300"),
            ],
            "alert_rule_test": [
                at(100, "HermesBackupMissing", []),
                at(125, "HermesBackupMissing", []),  # over the gap, but not yet `for` 10m
                at(140, "HermesBackupMissing", [_alert(missing, AGENT)]),
                at(140, "HermesBackupFailed", []),
            ],
        },
        {  # never backed up: no status record at all, only the agent's uptime
            "interval": "1m",
            "input_series": [uptime],
            "alert_rule_test": [
                at(100, "HermesBackupMissing", []),
                at(140, "HermesBackupMissing", [_alert(missing, AGENT)]),
            ],
        },
        {  # the last run failed at t=61m; success recorded until then; recovered at 121m
            "interval": "1m",
            "input_series": [
                uptime,
                _series(
                    "hermes_backup_last_success_timestamp_seconds",
                    AGENT,
                    "0+60x60 3600x59 7260+60x100",
                ),
                _series("hermes_backup_last_run_success", AGENT, "1x60 0x59 1x100"),
                _series("hermes_backup_last_run_success", OTHER, "0x300"),
            ],
            "alert_rule_test": [
                at(60, "HermesBackupFailed", []),
                at(63, "HermesBackupFailed", []),  # failed, but not yet `for` 5m
                at(70, "HermesBackupFailed", [_alert(failed, AGENT)]),
                at(70, "HermesBackupMissing", []),
                at(130, "HermesBackupFailed", []),
            ],
        },
    ]


def test_alert_rules_pass_promtool_and_fire_only_when_they_must(
    promtool: str, tmp_path: Path
) -> None:
    (rule,) = _render_rule({"backup": {"interval": 3600}})
    rules_file = tmp_path / "rules.yaml"
    rules_file.write_text(yaml.safe_dump({"groups": rule["spec"]["groups"]}))
    check = subprocess.run(
        [promtool, "check", "rules", str(rules_file)], capture_output=True, text=True
    )
    assert check.returncode == 0, check.stdout + check.stderr
    assert "SUCCESS: 2 rules found" in check.stdout + check.stderr

    rules = {r["alert"]: r for g in rule["spec"]["groups"] for r in g["rules"]}
    tests_file = tmp_path / "tests.yaml"
    tests_file.write_text(
        yaml.safe_dump(
            {
                "rule_files": [rules_file.name],
                "evaluation_interval": "1m",
                "tests": _rule_tests(rules),
            }
        )
    )
    run = subprocess.run(
        [promtool, "test", "rules", str(tests_file)], capture_output=True, text=True
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert "SUCCESS" in run.stdout + run.stderr


def test_promtool_test_fails_when_an_alert_must_fire_but_does_not(
    promtool: str, tmp_path: Path
) -> None:
    """The harness itself can fail: a healthy agent claimed to alert is refused."""
    (rule,) = _render_rule({"backup": {"interval": 3600}})
    rules_file = tmp_path / "rules.yaml"
    rules_file.write_text(yaml.safe_dump({"groups": rule["spec"]["groups"]}))
    rules = {r["alert"]: r for g in rule["spec"]["groups"] for r in g["rules"]}
    wrong = {
        "interval": "1m",
        "input_series": [
            _series("hermes_runtime_uptime_seconds", AGENT, "0+60x300"),
            _series("hermes_backup_last_success_timestamp_seconds", AGENT, "0+60x300"),
        ],
        "alert_rule_test": [
            {
                "eval_time": "290m",
                "alertname": "HermesBackupMissing",
                "exp_alerts": [_alert(rules["HermesBackupMissing"], AGENT)],
            }
        ],
    }
    tests_file = tmp_path / "tests.yaml"
    tests_file.write_text(yaml.safe_dump({"rule_files": [rules_file.name], "tests": [wrong]}))
    run = subprocess.run(
        [promtool, "test", "rules", str(tests_file)], capture_output=True, text=True
    )
    assert run.returncode != 0
    assert "HermesBackupMissing" in run.stdout + run.stderr


def test_repository_password_comes_from_a_secret_never_a_literal() -> None:
    manifest = render()
    secret = manifest.one("Secret", f"{FULLNAME}-backup-password")
    assert secret["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"
    assert len(secret["data"]["RESTIC_PASSWORD"]) >= 48
    ref = env_map(_cron_pod()["containers"][0])["RESTIC_PASSWORD"]
    assert ref == {
        "secretKeyRef": {"name": f"{FULLNAME}-backup-password", "key": "RESTIC_PASSWORD"}
    }

    own = render({"backup": {"repository": {"existingSecret": "my-restic"}}})
    assert f"{FULLNAME}-backup-password" not in [s["metadata"]["name"] for s in own.all("Secret")]
    cron = own.one("CronJob")["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    assert env_map(cron["containers"][0])["RESTIC_PASSWORD"]["secretKeyRef"]["name"] == "my-restic"


def test_a_password_listed_in_vault_secrets_replaces_the_generated_secret() -> None:
    values = {
        "vault": {
            "enabled": True,
            "address": "https://vault:8200",
            "role": "r",
            "secrets": [{"path": "secret/data/backup", "key": "pw", "env": "RESTIC_PASSWORD"}],
        }
    }
    manifest = render(values)
    assert f"{FULLNAME}-backup-password" not in [
        s["metadata"]["name"] for s in manifest.all("Secret")
    ]
    cron = manifest.one("CronJob")["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    assert "RESTIC_PASSWORD" not in env_map(cron["containers"][0])
