"""Backup scratch volume, the status record, and the PrometheusRules tested with real promtool."""

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
    return render(values).backup_cronjob["spec"]["jobTemplate"]["spec"]["template"]["spec"]


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
    assert '--status-file "$BACKUP_STATUS_FILE"' in script
    # The data volume read-only, and the record's folder alone read-write (test_chart_roles.py).
    status_file = env_map(container)["BACKUP_STATUS_FILE"]
    assert status_file == "/run/hermes/backup-status/backup-status.json"
    mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
    assert mounts["/opt/data"] == {"name": "data", "mountPath": "/opt/data", "readOnly": True}
    assert mounts["/run/hermes/backup-status"] == {
        "name": "data",
        "mountPath": "/run/hermes/backup-status",
        "subPath": ".hermes-runtime",
    }
    writable = _cron_pod({"backup": {"dataVolumeReadOnly": False}})["containers"][0]
    env = env_map(writable)
    assert env["BACKUP_STATUS_FILE"] == "/opt/data/.hermes-runtime/backup-status.json"
    assert [m for m in writable["volumeMounts"] if m["name"] == "data"] == [
        {"name": "data", "mountPath": "/opt/data"}
    ]


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


def _named(docs: list[dict], name: str) -> dict:
    (rule,) = [d for d in docs if d["metadata"]["name"] == name]
    return rule


def _backup_rule(values: Mapping[str, Any] | None = None) -> dict:
    return _named(_render_rule(values), f"{FULLNAME}-backup")


def _agent_rule(values: Mapping[str, Any] | None = None) -> dict:
    return _named(_render_rule(values), FULLNAME)


def _alerts(rule: dict) -> list[str]:
    return [r["alert"] for g in rule["spec"]["groups"] for r in g["rules"]]


def test_prometheus_rule_only_when_the_cluster_serves_the_api() -> None:
    assert _render_rule(api=False) == []
    assert _render_rule({"metrics": {"enabled": False}}) == []
    only_agent = _render_rule({"backup": {"prometheusRule": {"enabled": False}}})
    assert [d["metadata"]["name"] for d in only_agent] == [FULLNAME]
    only_backup = _render_rule({"metrics": {"prometheusRule": {"enabled": False}}})
    assert [d["metadata"]["name"] for d in only_backup] == [f"{FULLNAME}-backup"]
    rule = _backup_rule({"backup": {"prometheusRule": {"labels": {"release": "kps"}}}})
    assert rule["kind"] == "PrometheusRule"
    assert rule["metadata"]["labels"]["release"] == "kps"
    assert _alerts(rule) == ["HermesBackupMissing", "HermesBackupFailed"]
    agent = _agent_rule({"metrics": {"prometheusRule": {"labels": {"release": "kps"}}}})
    assert agent["metadata"]["labels"]["release"] == "kps"
    assert _alerts(agent) == ["HermesDataVolumeFull", "HermesGatewayRestarting"]


def test_schema_refuses_bad_alert_thresholds() -> None:
    for bad, where in (
        ({"dataVolumeFreeRatio": 1.5}, "dataVolumeFreeRatio"),
        ({"gatewayCrashes": 0}, "gatewayCrashes"),
        ({"gatewayCrashWindow": "a while"}, "gatewayCrashWindow"),
    ):
        error = render_error({"metrics": {"prometheusRule": bad}})
        assert where in error, error
    error = render_error({"backup": {"prometheusRule": {"missingFor": "soon"}}})
    assert "missingFor" in error, error


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


def _alert(
    rule: dict, labels: Mapping[str, str], value: Mapping[str, str] | None = None
) -> dict[str, Any]:
    """The alert as promtool must see it; ``value`` maps each `{{ $value | ... }}` of the
    annotations to its expected text."""

    def expand(text: str) -> str:
        for key, label in labels.items():
            text = text.replace(f"{{{{ $labels.{key} }}}}", label)
        for template, shown in (value or {}).items():
            text = text.replace(template, shown)
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
    rule = _backup_rule({"backup": {"interval": 3600}})
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


def _promtool_test(promtool: str, tmp_path: Path, rule: dict, tests: list[dict]) -> str:
    """`promtool check rules` then `promtool test rules`; their output (asserted to pass)."""
    rules_file = tmp_path / "rules.yaml"
    rules_file.write_text(yaml.safe_dump({"groups": rule["spec"]["groups"]}))
    check = subprocess.run(
        [promtool, "check", "rules", str(rules_file)], capture_output=True, text=True
    )
    assert check.returncode == 0, check.stdout + check.stderr
    tests_file = tmp_path / "tests.yaml"
    tests_file.write_text(
        yaml.safe_dump(
            {"rule_files": [rules_file.name], "evaluation_interval": "1m", "tests": tests}
        )
    )
    run = subprocess.run(
        [promtool, "test", "rules", str(tests_file)], capture_output=True, text=True
    )
    assert run.returncode == 0, run.stdout + run.stderr
    return check.stdout + run.stdout


VOLUME_FREE = "{{ $value | humanizePercentage }}"
CRASHES = '{{ $value | printf "%.0f" }}'


def test_agent_alerts_fire_on_a_full_volume_and_a_crashing_gateway(
    promtool: str, tmp_path: Path
) -> None:
    """Defaults: under 10% free for 5m; 3 crashes within 15m (planned restarts are not in
    the crash counter: tests/unit/agent/test_agent_metrics_faults.py)."""
    rule = _agent_rule()
    rules = {r["alert"]: r for g in rule["spec"]["groups"] for r in g["rules"]}
    full, crashing = rules["HermesDataVolumeFull"], rules["HermesGatewayRestarting"]

    def at(minutes: int, alert: str, fired: list[dict]) -> dict:
        return {"eval_time": f"{minutes}m", "alertname": alert, "exp_alerts": fired}

    size = "1000000000x120"
    tests = [
        {  # 50% free, then 5% from t=31m to 60m, then 50% again
            "interval": "1m",
            "input_series": [
                _series("hermes_runtime_data_volume_size_bytes", AGENT, size),
                _series(
                    "hermes_runtime_data_volume_free_bytes",
                    AGENT,
                    "500000000x30 50000000x29 500000000x60",
                ),
                # another agent's full volume does not fire for this release
                _series("hermes_runtime_data_volume_size_bytes", OTHER, size),
                _series("hermes_runtime_data_volume_free_bytes", OTHER, "0x120"),
            ],
            "alert_rule_test": [
                at(30, "HermesDataVolumeFull", []),
                at(33, "HermesDataVolumeFull", []),  # under 10%, not yet `for` 5m
                at(40, "HermesDataVolumeFull", [_alert(full, AGENT, {VOLUME_FREE: "5%"})]),
                at(65, "HermesDataVolumeFull", []),
            ],
        },
        {  # crashes at 11m, 12m, 13m; one crash at 60m is not a loop
            "interval": "1m",
            "input_series": [
                _series("hermes_runtime_gateway_crashes_total", AGENT, "0x10 1 2 3x46 4x60"),
                _series("hermes_runtime_gateway_crashes_total", OTHER, "0+1x120"),
            ],
            "alert_rule_test": [
                at(12, "HermesGatewayRestarting", []),
                at(14, "HermesGatewayRestarting", [_alert(crashing, AGENT, {CRASHES: "3"})]),
                at(35, "HermesGatewayRestarting", []),
                at(65, "HermesGatewayRestarting", []),
            ],
        },
    ]
    output = _promtool_test(promtool, tmp_path, rule, tests)
    assert "SUCCESS: 2 rules found" in output, output


def test_missing_for_sets_how_long_the_backup_may_be_missing(promtool: str, tmp_path: Path) -> None:
    """backup.prometheusRule.missingFor: 2m fires 8 minutes before the default 10m would."""
    rule = _backup_rule({"backup": {"interval": 3600, "prometheusRule": {"missingFor": "2m"}}})
    missing = {r["alert"]: r for g in rule["spec"]["groups"] for r in g["rules"]}[
        "HermesBackupMissing"
    ]
    stalled = {
        "interval": "1m",
        "input_series": [
            _series("hermes_runtime_uptime_seconds", AGENT, "0+60x300"),
            _series("hermes_backup_last_success_timestamp_seconds", AGENT, "0x300"),
        ],
        "alert_rule_test": [
            {"eval_time": "121m", "alertname": "HermesBackupMissing", "exp_alerts": []},
            {
                "eval_time": "124m",
                "alertname": "HermesBackupMissing",
                "exp_alerts": [_alert(missing, AGENT)],
            },
        ],
    }
    _promtool_test(promtool, tmp_path, rule, [stalled])


def test_promtool_test_fails_when_an_alert_must_fire_but_does_not(
    promtool: str, tmp_path: Path
) -> None:
    """The harness itself can fail: a healthy agent claimed to alert is refused."""
    rule = _backup_rule({"backup": {"interval": 3600}})
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
    # Generated once in the cluster by the secrets Job, never in a render (Argo CD).
    assert f"{FULLNAME}-backup-password" not in [
        s["metadata"]["name"] for s in manifest.all("Secret")
    ]
    job = manifest.one("Job", f"{FULLNAME}-secrets")["spec"]["template"]["spec"]["containers"][0]
    assert f"{FULLNAME}-backup-password/RESTIC_PASSWORD" in job["args"]
    ref = env_map(_cron_pod()["containers"][0])["RESTIC_PASSWORD"]
    assert ref == {
        "secretKeyRef": {"name": f"{FULLNAME}-backup-password", "key": "RESTIC_PASSWORD"}
    }

    own = render({"backup": {"repository": {"existingSecret": "my-restic"}}})
    assert f"{FULLNAME}-backup-password" not in [s["metadata"]["name"] for s in own.all("Secret")]
    cron = own.backup_cronjob["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    assert env_map(cron["containers"][0])["RESTIC_PASSWORD"]["secretKeyRef"]["name"] == "my-restic"


def test_a_password_listed_in_vault_secrets_replaces_the_generated_secret() -> None:
    values = {
        "vault": {
            "enabled": True,
            "address": "https://vault:8200",
            "role": "r",
            "backupRole": "r-backup",
            "secrets": [{"path": "secret/data/backup", "key": "pw", "env": "RESTIC_PASSWORD"}],
        }
    }
    manifest = render(values)
    assert f"{FULLNAME}-backup-password" not in [
        s["metadata"]["name"] for s in manifest.all("Secret")
    ]
    cron = manifest.backup_cronjob["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    assert "RESTIC_PASSWORD" not in env_map(cron["containers"][0])
