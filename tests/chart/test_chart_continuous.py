"""Continuous replication: the Litestream sidecar, its target and credentials, and restore."""

from __future__ import annotations

from typing import Any

import pytest
from chart_testlib import env_map, render, render_error
from pss import restricted_violations

ON = {"backup": {"continuous": {"enabled": True}}}
S3 = {
    "backup": {
        "continuous": {"enabled": True, "syncInterval": 0.5},
        "target": {
            "type": "s3",
            "s3": {
                "bucket": "hermes-bkp",
                "prefix": "team-a",
                "endpoint": "http://seaweedfs:8333",
                "existingSecret": "s3-creds",
            },
        },
    }
}
VAULT = {
    "vault": {
        "enabled": True,
        "address": "https://vault.example:8200",
        "role": "hermes",
        "backupRole": "hermes-backup",
        "secrets": [{"path": "secret/data/s3", "key": "id", "env": "AWS_ACCESS_KEY_ID"}],
    }
}


def test_off_by_default() -> None:
    manifest = render()
    assert "replicate" not in [c["name"] for c in manifest.agent_pod.get("initContainers", [])]
    assert "replicate" not in [c["name"] for c in manifest.agent_pod["containers"]]


def test_native_sidecar_after_restore_replicating_the_data_volume_to_the_backup_target() -> None:
    manifest = render({**ON, "restore": {"fromSnapshot": "latest"}})
    init = [c["name"] for c in manifest.agent_pod["initContainers"]]
    assert init.index("restore") < init.index("replicate")  # never replicates a half restore
    replicate = manifest.container("replicate")
    assert replicate["restartPolicy"] == "Always"
    args = replicate["args"]
    assert args[:3] == ["hermes-runtime", "backup", "replicate"]
    assert args[args.index("--target") + 1] == "$(BACKUP_TARGET)"
    assert args[args.index("--data-dir") + 1] == "/opt/data"
    assert args[args.index("--sync-interval") + 1] == "1"
    assert args[args.index("--exclude") + 1] == ".git-sync/**"  # backup.excludes apply too
    env = env_map(replicate)
    assert env["BACKUP_TARGET"] == "file:///backup"
    assert "RESTIC_PASSWORD" not in env  # Litestream never needs the restic password
    mounts = {m["name"]: m for m in replicate["volumeMounts"]}
    assert mounts["data"]["mountPath"] == "/opt/data"
    assert mounts["backup"]["mountPath"] == "/backup"
    assert not mounts["backup"].get("readOnly")
    assert restricted_violations(manifest.agent_pod) == []


def test_s3_target_gets_the_backups_endpoint_and_credentials_from_the_same_secret() -> None:
    manifest = render(S3)
    replicate = manifest.container("replicate")
    env = env_map(replicate)
    assert env["BACKUP_TARGET"] == "s3://hermes-bkp/team-a"
    assert env["AWS_ENDPOINT_URL"] == "http://seaweedfs:8333"
    assert env["AWS_ACCESS_KEY_ID"] == {
        "secretKeyRef": {"name": "s3-creds", "key": "AWS_ACCESS_KEY_ID"}
    }
    backup = _cron(S3)["containers"][0]
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_REGION", "BACKUP_TARGET"):
        assert env[name] == env_map(backup)[name]
    args = replicate["args"]
    assert args[args.index("--sync-interval") + 1] == "0.5"
    assert "backup" not in {m["name"] for m in replicate["volumeMounts"]}


def _cron(values: dict) -> dict:
    cron = render(values).backup_cronjob
    return cron["spec"]["jobTemplate"]["spec"]["template"]["spec"]


def test_credentials_from_vault_are_sourced_without_reparsing_arguments() -> None:
    # The S3 keys from Vault alone: with backup.target.s3.existingSecret too it is refused.
    backup: dict[str, Any] = S3["backup"]
    s3 = {**backup["target"]["s3"], "existingSecret": ""}
    from_vault = {"backup": {**backup, "target": {"type": "s3", "s3": s3}}}
    replicate = render({**from_vault, **VAULT}).container("replicate")
    args = replicate["args"]
    assert args[:2] == ["/bin/sh", "-c"]
    assert args[3:7] == ["with-secrets", "hermes-runtime", "backup", "replicate"]
    assert env_map(replicate)["HERMES_RUNTIME_SECRETS_ENV"] == "/run/hermes/secrets/env"


def test_plain_container_where_native_sidecars_are_off() -> None:
    legacy = render(ON, kube_version="1.28.0")
    replicate = legacy.container("replicate")
    assert replicate in legacy.agent_pod["containers"]
    assert "restartPolicy" not in replicate


def test_needs_backup_enabled() -> None:
    error = render_error({"backup": {"enabled": False, "continuous": {"enabled": True}}})
    assert "backup.continuous.enabled: needs backup.enabled=true" in error


def test_schema_refuses_a_non_positive_interval() -> None:
    error = render_error({"backup": {"continuous": {"enabled": True, "syncInterval": 0}}})
    assert "syncInterval" in error


def test_restore_reads_the_replicas_only_when_asked() -> None:
    """restore.fromReplicas adds `--replicas <target>/litestream` (the kubelet expands
    $(BACKUP_TARGET)); without it the restore takes the snapshot alone, replicas being
    unencrypted files anyone with write access to the bucket can change."""
    values = {**ON, "restore": {"fromSnapshot": "latest"}}
    assert "--replicas" not in render(values).container("restore")["args"]
    asked = render({**ON, "restore": {"fromSnapshot": "latest", "fromReplicas": True}})
    args = asked.container("restore")["args"]
    assert args[args.index("--replicas") + 1] == "$(BACKUP_TARGET)/litestream"
    assert env_map(asked.container("restore"))["BACKUP_TARGET"] == "file:///backup"


@pytest.mark.parametrize(
    ("values", "message"),
    [
        (
            {**ON, "restore": {"fromSnapshot": "0123abcd", "fromReplicas": True}},
            'restore.fromReplicas: true needs restore.fromSnapshot: latest (it is "0123abcd")',
        ),
        (
            {"restore": {"fromSnapshot": "latest", "fromReplicas": True}},
            "restore.fromReplicas: true while backup.continuous.enabled is false",
        ),
    ],
)
def test_from_replicas_without_replicas_to_read_is_refused(
    values: dict[str, Any], message: str
) -> None:
    assert message in render_error(values)
