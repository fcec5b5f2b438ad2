"""A bucket role by ServiceAccount (IRSA) reaches the backup pods and never the agent pod.

docs/security.md ("Cloud identities") tells platform teams to annotate the backup pods'
ServiceAccounts and give no S3 keys. That works only if the annotation lands on the
ServiceAccounts the backup, verify and pre-upgrade pods run as, not on the agent pod's (whose
every container, the agent's shell included, would get the role), and if no pod is handed keys
that would win over the role.
"""

from __future__ import annotations

from typing import Any

from chart_testlib import FULLNAME, all_containers, env_map, pod_specs, render

ROLE = "eks.amazonaws.com/role-arn"
ARN = "arn:aws:iam::111122223333:role/hermes-backup"
IRSA: dict[str, Any] = {
    "backup": {
        "serviceAccount": {"annotations": {ROLE: ARN}},
        "target": {
            "type": "s3",
            "s3": {"bucket": "hermes-backups", "region": "eu-central-1", "existingSecret": ""},
        },
    },
}


def _accounts() -> dict[str, dict]:
    return {sa["metadata"]["name"]: sa for sa in render(IRSA).all("ServiceAccount")}


def test_the_role_is_on_the_backup_service_accounts_only() -> None:
    accounts = _accounts()
    for name in (f"{FULLNAME}-backup", f"{FULLNAME}-pre-upgrade"):
        assert accounts[name]["metadata"]["annotations"][ROLE] == ARN, name
        assert accounts[name]["automountServiceAccountToken"] is False, name
    assert ROLE not in _annotations(accounts[FULLNAME])


def _annotations(obj: dict) -> dict:
    return obj["metadata"].get("annotations") or {}


def test_the_backup_pods_run_as_the_annotated_accounts_and_the_agent_does_not() -> None:
    annotated = {name for name, sa in _accounts().items() if ROLE in _annotations(sa)}
    runs_as = {where: pod.get("serviceAccountName") for where, pod in pod_specs(render(IRSA))}
    assert runs_as[f"CronJob/{FULLNAME}-backup"] in annotated
    assert runs_as[f"CronJob/{FULLNAME}-verify"] in annotated
    assert runs_as[f"Job/{FULLNAME}-pre-upgrade"] in annotated
    assert runs_as[f"Deployment/{FULLNAME}"] not in annotated


def test_no_container_gets_keys_that_would_win_over_the_role() -> None:
    for where, pod in pod_specs(render(IRSA)):
        for container in all_containers(pod):
            env = env_map(container)
            assert "AWS_ACCESS_KEY_ID" not in env, f"{where} {container['name']}"
            if container["name"] == "backup":
                # restic's client calls the regional STS endpoint of this region.
                assert env["AWS_REGION"] == "eu-central-1", where
