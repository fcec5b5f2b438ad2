"""Backups: the CronJob beside a ReadWriteOnce volume, the sidecar mode, targets, restore."""

from __future__ import annotations

import shlex

from chart_testlib import FULLNAME, container_names, env_map, render, render_error

S3 = {
    "backup": {
        "target": {
            "type": "s3",
            "s3": {
                "bucket": "hermes-bkp",
                "prefix": "/team/a/",
                "endpoint": "http://seaweedfs:8333",
                "region": "eu-west-1",
                "existingSecret": "s3-creds",
            },
        }
    }
}


def _cron_pod(values: dict | None = None) -> dict:
    cron = render(values).backup_cronjob
    return cron["spec"]["jobTemplate"]["spec"]["template"]["spec"]


def _script(container: dict) -> str:
    assert container["args"][:2] == ["/bin/sh", "-c"]
    return container["args"][2]


def test_cronjob_settings_come_from_values() -> None:
    values = {
        "backup": {
            "schedule": "5 4 * * *",
            "timeZone": "Europe/Paris",
            "concurrencyPolicy": "Replace",
            "successfulJobsHistoryLimit": 1,
            "failedJobsHistoryLimit": 5,
        }
    }
    spec = render(values).backup_cronjob["spec"]
    assert spec["schedule"] == "5 4 * * *"
    assert spec["timeZone"] == "Europe/Paris"
    assert spec["concurrencyPolicy"] == "Replace"
    assert spec["successfulJobsHistoryLimit"] == 1
    assert spec["failedJobsHistoryLimit"] == 5
    # A job stuck Pending (agent down: affinity unmet) must not block later backups.
    assert spec["jobTemplate"]["spec"]["activeDeadlineSeconds"] == 3600


def test_cronjob_follows_the_agent_to_its_node_for_read_write_once() -> None:
    manifest = render()
    pod = manifest.backup_cronjob["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    terms = pod["affinity"]["podAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert len(terms) == 1
    assert terms[0]["topologyKey"] == "kubernetes.io/hostname"
    agent_labels = manifest.deployment["spec"]["template"]["metadata"]["labels"]
    selector = terms[0]["labelSelector"]["matchLabels"]
    assert selector.items() <= agent_labels.items()
    backup_labels = manifest.backup_cronjob["spec"]["jobTemplate"]["spec"]["template"]
    assert not selector.items() <= backup_labels["metadata"]["labels"].items()
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["data"]["persistentVolumeClaim"]["claimName"] == f"{FULLNAME}-data"


def test_agent_pod_holds_the_backup_claim_so_it_binds_at_install_on_the_agents_node() -> None:
    # WaitForFirstConsumer: without a consumer before the first CronJob run, the claim
    # stays Pending and `helm install --wait` never returns.
    manifest = render()
    volumes = {v["name"]: v for v in manifest.agent_pod["volumes"]}
    assert volumes["backup"]["persistentVolumeClaim"]["claimName"] == f"{FULLNAME}-backup"
    # No container of the agent pod mounts it in cronjob mode: only the job writes there.
    mounted = {m["name"] for c in manifest.agent_pod["containers"] for m in c["volumeMounts"]}
    assert "backup" not in mounted


def test_existing_backup_claim_is_also_held_by_the_agent_pod() -> None:
    manifest = render({"backup": {"target": {"pvc": {"existingClaim": "old-backups"}}}})
    volumes = {v["name"]: v for v in manifest.agent_pod["volumes"]}
    assert volumes["backup"]["persistentVolumeClaim"]["claimName"] == "old-backups"
    assert len(manifest.all("PersistentVolumeClaim")) == 1


def test_agent_pod_has_no_backup_volume_for_s3_or_without_backups() -> None:
    for values in (S3, {"backup": {"enabled": False}}):
        names = {v["name"] for v in render(values).agent_pod["volumes"]}
        assert "backup" not in names, values


def test_cronjob_creates_then_prunes_with_retention() -> None:
    container = _cron_pod()["containers"][0]
    script = _script(container)
    create = script.index('hermes-runtime backup create --data-dir "$HERMES_HOME"')
    prune = script.index("hermes-runtime backup prune")
    assert create < prune
    words = shlex.split(script[prune:].splitlines()[0])
    assert words[words.index("--keep-last") + 1] == "7"
    assert words[words.index("--keep-daily") + 1] == "7"
    assert words[words.index("--keep-weekly") + 1] == "4"
    assert "--exclude '.git-sync/**'" in script
    assert "set -eu" in script


def test_zero_daily_and_weekly_retention_are_left_out() -> None:
    values = {"backup": {"retention": {"keepLast": 3, "keepDaily": 0, "keepWeekly": 0}}}
    script = _script(_cron_pod(values)["containers"][0])
    assert "--keep-last 3" in script
    assert "--keep-daily" not in script and "--keep-weekly" not in script


def test_pvc_target_is_the_embedded_default() -> None:
    manifest = render()
    backup_pvc = manifest.one("PersistentVolumeClaim", f"{FULLNAME}-backup")
    assert backup_pvc["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"
    # Argo CD does not read Helm's keep: neither its prune nor an app deletion may take it.
    assert backup_pvc["metadata"]["annotations"]["argocd.argoproj.io/sync-options"] == (
        "Prune=false,Delete=false"
    )
    container = _cron_pod()["containers"][0]
    assert env_map(container)["BACKUP_TARGET"] == "file:///backup"
    assert {"name": "backup", "mountPath": "/backup"} in container["volumeMounts"]


def test_s3_target_takes_credentials_from_a_secret_never_from_args() -> None:
    manifest = render(S3)
    assert f"{FULLNAME}-backup" not in [
        p["metadata"]["name"] for p in manifest.all("PersistentVolumeClaim")
    ]
    container = _cron_pod(S3)["containers"][0]
    env = env_map(container)
    assert env["BACKUP_TARGET"] == "s3://hermes-bkp/team/a"
    assert env["AWS_ENDPOINT_URL"] == "http://seaweedfs:8333"
    assert env["AWS_REGION"] == "eu-west-1"
    assert env["AWS_ACCESS_KEY_ID"] == {
        "secretKeyRef": {"name": "s3-creds", "key": "AWS_ACCESS_KEY_ID"}
    }
    assert env["AWS_SECRET_ACCESS_KEY"]["secretKeyRef"]["key"] == "AWS_SECRET_ACCESS_KEY"
    assert "AWS_SECRET" not in _script(container)


def test_sidecar_mode_backs_up_inside_the_agent_pod_for_read_write_once_pod() -> None:
    values = {
        "persistence": {"accessModes": ["ReadWriteOncePod"]},
        "backup": {"mode": "sidecar", "interval": 3600},
    }
    manifest = render(values)
    assert not manifest.has("CronJob")
    backup = manifest.container("backup")
    assert backup in manifest.agent_pod["containers"]
    script = _script(backup)
    assert "while :; do" in script
    assert "sleep 3600" in script
    assert "backup_once ||" in script  # one failed run does not kill the loop
    mounts = {m["mountPath"] for m in backup["volumeMounts"]}
    assert {"/opt/data", "/backup"} <= mounts


def test_sidecar_mode_works_without_persistence() -> None:
    manifest = render({"persistence": {"enabled": False}, "backup": {"mode": "sidecar"}})
    assert "backup" in container_names(manifest.agent_pod)
    volumes = {v["name"]: v for v in manifest.agent_pod["volumes"]}
    assert volumes["data"] == {"name": "data", "emptyDir": {}}


def test_backup_disabled_renders_no_job_and_no_backup_pvc() -> None:
    manifest = render({"backup": {"enabled": False}})
    assert not manifest.has("CronJob")
    assert len(manifest.all("PersistentVolumeClaim")) == 1


def test_restore_fills_an_empty_volume_before_plugins_and_agent() -> None:
    values = {
        "restore": {"fromSnapshot": "latest"},
        "plugins": [{"name": "weather", "repo": "https://git.example.com/w.git"}],
    }
    manifest = render(values)
    init = manifest.agent_pod["initContainers"]
    assert [c["name"] for c in init] == ["restore", "git-sync-weather"]
    restore = init[0]
    assert "command" not in restore
    assert restore["args"] == [
        "hermes-runtime",
        "backup",
        "restore",
        "--target",
        "$(BACKUP_TARGET)",
        "--snapshot",
        "latest",
        "--data-dir",
        "/opt/data",
        "--if-empty",
    ]
    assert env_map(restore)["BACKUP_TARGET"] == "file:///backup"
    mounts = {m["mountPath"]: m for m in restore["volumeMounts"]}
    assert mounts["/backup"]["readOnly"] is True
    assert mounts["/opt/data"]["name"] == "data"


def test_restore_from_s3_uses_the_same_credentials() -> None:
    values = {**S3, "restore": {"fromSnapshot": "3fa2c1d4e5f60718"}}
    restore = render(values).container("restore")
    env = env_map(restore)
    assert env["BACKUP_TARGET"] == "s3://hermes-bkp/team/a"
    assert env["AWS_ACCESS_KEY_ID"]["secretKeyRef"]["name"] == "s3-creds"
    assert "3fa2c1d4e5f60718" in restore["args"]


def test_backup_resources_apply_to_the_job() -> None:
    values = {"backup": {"resources": {"limits": {"memory": "3Gi"}}}}
    container = _cron_pod(values)["containers"][0]
    assert container["resources"]["limits"] == {"memory": "3Gi"}


def _pod_of(obj: dict) -> dict:
    spec = obj["spec"]
    return (spec["jobTemplate"]["spec"] if obj["kind"] == "CronJob" else spec)["template"]["spec"]


def test_a_pre_upgrade_hook_backs_up_with_labels_and_fails_the_upgrade_when_it_fails() -> None:
    """Upgrades with a way back (issue 29): a labelled snapshot before anything changes."""
    manifest = render()
    job = manifest.one("Job", f"{FULLNAME}-pre-upgrade")
    annotations = job["metadata"]["annotations"]
    assert annotations["helm.sh/hook"] == "pre-upgrade"
    assert annotations["helm.sh/hook-delete-policy"] == "before-hook-creation"  # log kept
    # After the secrets Job (weight 0): the restic password exists when it runs.
    assert int(annotations["helm.sh/hook-weight"]) > 0
    pod = _pod_of(job)
    assert pod["restartPolicy"] == "Never"
    script = pod["containers"][0]["args"][2]
    assert "--label 'pre-upgrade=0.1.0' --label 'release-revision=1'" in script
    assert "backup prune" not in script  # no prune on the way into an upgrade
    # The same pod as the scheduled backup's: the agent's node, its volumes, its secrets.
    cron = _pod_of(manifest.backup_cronjob)
    assert pod["affinity"] == cron["affinity"] and pod["volumes"] == cron["volumes"]
    assert pod["containers"][0]["env"] == cron["containers"][0]["env"]
    for off in (
        {"backup": {"preUpgrade": {"enabled": False}}},
        {"backup": {"mode": "sidecar"}},
        {"backup": {"enabled": False}},
        # The restore runbook's upgrade (step 2a) makes the lost data PVC the hook would mount.
        {"restore": {"fromSnapshot": "3fa2c1d4"}},
    ):
        assert f"{FULLNAME}-pre-upgrade" not in [
            j["metadata"]["name"] for j in render(off).all("Job")
        ]


def test_the_full_check_runs_weekly_on_the_latest_snapshot() -> None:
    manifest = render({"backup": {"verify": {"schedule": "30 2 * * 6"}}})
    cron = manifest.one("CronJob", f"{FULLNAME}-verify")
    assert cron["spec"]["schedule"] == "30 2 * * 6"
    assert cron["spec"]["concurrencyPolicy"] == "Forbid"
    script = _pod_of(cron)["containers"][0]["args"][2]
    assert 'backup verify --target "$BACKUP_TARGET" --snapshot latest' in script
    assert "backup create" not in script
    # Unset: weekly, 04:00-06:59, minute and day spread by release (test_chart_fleet.py).
    default = render().one("CronJob", f"{FULLNAME}-verify")["spec"]["schedule"]
    minute, hour, day_of_month, month, day_of_week = default.split(" ")
    assert int(minute) in range(60) and int(hour) in (4, 5, 6), default
    assert (day_of_month, month) == ("*", "*") and int(day_of_week) in range(7), default
    assert not render({"backup": {"verify": {"enabled": False}}}).all("CronJob")[1:]


def test_restic_gets_a_time_limit_inside_the_jobs_deadline() -> None:
    """A store that stops answering is retried by restic for up to 15 minutes: without a limit
    the Job's deadline killed the pod and no failure was recorded (issue 30)."""
    manifest = render()
    scheduled = _pod_of(manifest.backup_cronjob)["containers"][0]["args"][2]
    assert "--timeout 3000 " in scheduled
    pre = _pod_of(manifest.one("Job", f"{FULLNAME}-pre-upgrade"))["containers"][0]["args"][2]
    assert "--timeout 1740 " in pre  # its own, shorter deadline (1800) minus a minute
    sidecar = render({"backup": {"mode": "sidecar"}}).container("backup")["args"][2]
    assert "--timeout 3000 " in sidecar
    error = render_error({"backup": {"timeoutSeconds": 3600}})
    assert "backup.timeoutSeconds: 3600 is not below backup.activeDeadlineSeconds" in error
