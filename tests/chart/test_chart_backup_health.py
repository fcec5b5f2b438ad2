"""Backup scratch volume, the status record and the repository password.

The backup alerts are tested with promtool in test_chart_alerts_backup.py."""

from __future__ import annotations

from chart_testlib import (
    FULLNAME,
    env_map,
    render,
    render_error,
)

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
