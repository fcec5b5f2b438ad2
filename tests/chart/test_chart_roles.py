"""One UID, one scratch folder and one identity per role: the boundaries the kernel enforces.

docs/security.md treats the agent container as the least trusted process of its pod (its shell
is a prompt injection away). Container names draw no boundary; what does: each role's own UID,
no writable volume shared between the agent and a container that holds a credential, the data
volume read-only where a role only reads it, and the backup pods' own ServiceAccount (so Vault
tells them from the agent pod). Checked on the render of every example, the defaults, and
every optional container at once.
"""

from __future__ import annotations

import re
from typing import Any

import pytest
from chart_testlib import (
    EXAMPLE_NAMES,
    FULLNAME,
    Manifest,
    all_containers,
    pod_specs,
    render,
    render_error,
)

VAULT: dict[str, Any] = {
    "enabled": True,
    "address": "https://vault.secrets.svc:8200",
    "role": "agent-role",
    "backupRole": "backup-role",
    "secrets": [
        {"path": "secret/data/a", "key": "llm", "env": "LLM_API_KEY"},
        {"path": "secret/data/b", "key": "id", "env": "AWS_ACCESS_KEY_ID"},
        {"path": "secret/data/b", "key": "secret", "env": "AWS_SECRET_ACCESS_KEY"},
        {"path": "secret/data/b", "key": "pw", "env": "RESTIC_PASSWORD"},
    ],
    "refresher": {"enabled": True},
}
S3 = {"type": "s3", "s3": {"bucket": "bkt", "endpoint": "http://s3.storage.svc:8333"}}
PLUGINS = [
    {"name": "weather", "repo": "https://git.example.com/w.git", "auth": {"existingSecret": "g"}},
    {
        "name": "tickets",
        "repo": "git@git.example.com:t.git",
        "auth": {"sshKeySecret": "k", "knownHosts": "git.example.com ssh-ed25519 AAAA"},
    },
]
# Every container of the agent pod at once (sidecar backup, replication, restore, Vault,
# plugins), and the same with backups in pods of their own.
EVERYTHING_SIDECAR: dict[str, Any] = {
    "vault": VAULT,
    "plugins": PLUGINS,
    "restore": {"fromSnapshot": "latest"},
    "backup": {"mode": "sidecar", "target": S3, "continuous": {"enabled": True}},
    "pluginPackages": {"enabled": True, "indexUrl": "https://pypi.example.com/simple"},
}
EVERYTHING_CRONJOB: dict[str, Any] = {
    **EVERYTHING_SIDECAR,
    "restore": {},
    "backup": {"mode": "cronjob", "target": S3, "continuous": {"enabled": True}},
}
SOURCES: list[tuple[str, dict[str, Any] | None, tuple[str, ...]]] = [
    ("defaults", None, ()),
    *[(name, None, (name,)) for name in EXAMPLE_NAMES],
    ("everything, sidecar", EVERYTHING_SIDECAR, ()),
    ("everything, cronjob", EVERYTHING_CRONJOB, ()),
    ("everything, legacy sidecars", EVERYTHING_SIDECAR, ()),
]
SOURCE_IDS = [source[0] for source in SOURCES]
KUBES = {"everything, legacy sidecars": "1.28.0"}
# The role each container of ours plays (its UID is the role's).
ROLES = {
    "agent": "agent",
    "vault-render": "vault",
    "vault-refresher": "vault",
    "restore": "restore",
    "replicate": "replicate",
    "backup": "backup",
    # The backup pods' opener of a repository an earlier version wrote as the agent's UID:
    # that UID by design, no credential, only the backup volume (repositoryAccessContainer).
    "repository-access": "agent",
    "plugin-deps": "pluginDeps",
}
# The writable mounts of the data volume a role other than the agent must keep: restore fills
# an empty volume (before the agent starts); Litestream writes each database's -wal/-shm and
# its own state beside the database; the backup writes its outcome record into .hermes-runtime.
MUST_WRITE_DATA = {"restore": None, "replicate": None, "backup": ".hermes-runtime"}


def _render(source: tuple[str, dict[str, Any] | None, tuple[str, ...]]) -> Manifest:
    name, overrides, examples = source
    kube = KUBES.get(name)
    if kube:
        return render(overrides, examples=examples, kube_version=kube)
    return render(overrides, examples=examples)


def role_of(container: dict) -> str:
    name = str(container["name"])
    if name.startswith("git-sync-"):
        return "gitSync"
    return ROLES[name]


def uid_of(pod: dict, container: dict) -> int:
    """The UID the container runs as: its own runAsUser, else the pod's."""
    own = container.get("securityContext", {}).get("runAsUser")
    return int(own if own is not None else pod["securityContext"]["runAsUser"])


def credentials_of(pod: dict, container: dict) -> list[str]:
    """What the container holds that the agent must not: env from a Secret, a Vault env file
    (a secrets-* volume), a projected ServiceAccount token, a Secret volume other than the
    agent's own API key."""
    volumes = {v["name"]: v for v in pod.get("volumes", [])}
    held = [
        f"env {item['name']} from a Secret"
        for item in container.get("env", [])
        if "secretKeyRef" in item.get("valueFrom", {})
    ]
    held += [f"envFrom {e}" for e in container.get("envFrom", []) if "secretRef" in e]
    for mount in container.get("volumeMounts", []):
        volume = volumes[mount["name"]]
        sources = [s for s in volume.get("projected", {}).get("sources", [])]
        if mount["name"].startswith("secrets-"):
            held.append(f"Vault env file {mount['name']}")
        elif any("serviceAccountToken" in s for s in sources):
            held.append(f"projected token {mount['name']}")
        elif "secret" in volume and mount["name"] != "api-key":
            held.append(f"Secret volume {mount['name']}")
    return held


def agent_pods(manifest: Manifest) -> list[tuple[str, dict]]:
    """The agent pod and the pods that share its data volume (backup, pre-upgrade)."""
    return [
        (where, pod)
        for where, pod in pod_specs(manifest)
        if where.startswith("Deployment/")
        or any(v["name"] == "data" for v in pod.get("volumes", []))
    ]


@pytest.mark.parametrize("source", SOURCES, ids=SOURCE_IDS)
def test_no_container_with_a_credential_runs_as_the_agent(source: Any) -> None:
    manifest = _render(source)
    agent_pod = manifest.agent_pod
    agent_uid = uid_of(agent_pod, manifest.container("agent"))
    checked = 0
    for where, pod in agent_pods(manifest):
        for container in all_containers(pod):
            if container["name"] == "agent":
                continue
            held = credentials_of(pod, container)
            if held:
                checked += 1
                assert uid_of(pod, container) != agent_uid, (where, container["name"], held)
    assert checked, "no container with a credential rendered: the test checks nothing"


@pytest.mark.parametrize("source", SOURCES, ids=SOURCE_IDS)
def test_every_role_has_its_own_uid(source: Any) -> None:
    manifest = _render(source)
    by_uid: dict[int, set[str]] = {}
    for _, pod in agent_pods(manifest):
        for container in all_containers(pod):
            by_uid.setdefault(uid_of(pod, container), set()).add(role_of(container))
    shared = {uid: roles for uid, roles in by_uid.items() if len(roles) > 1}
    assert not shared, shared


@pytest.mark.parametrize("source", SOURCES, ids=SOURCE_IDS)
def test_the_agent_shares_no_writable_volume_with_a_credential_holder(source: Any) -> None:
    """Its /tmp is its own (no Litestream config to swap, nothing to plant); the data volume
    only with the roles that must write it, each where it must; read-only everywhere else."""
    manifest = _render(source)
    pod = manifest.agent_pod
    agent_writes = {
        m["name"] for m in manifest.container("agent")["volumeMounts"] if not m.get("readOnly")
    }
    for where, other_pod in agent_pods(manifest):
        for container in all_containers(other_pod):
            if container["name"] == "agent" or not credentials_of(other_pod, container):
                continue
            for mount in container.get("volumeMounts", []):
                if mount.get("readOnly") or mount["name"] not in agent_writes:
                    continue
                if other_pod is not pod and mount["name"] != "data":
                    continue  # another pod's volume of the same name is another volume
                role = role_of(container)
                assert mount["name"] == "data" and role in MUST_WRITE_DATA, (
                    where,
                    container["name"],
                    mount,
                )
                assert mount.get("subPath") == MUST_WRITE_DATA[role], (where, mount)


def test_each_role_of_the_agent_pod_has_its_own_tmp() -> None:
    manifest = render(EVERYTHING_SIDECAR)
    for container in all_containers(manifest.agent_pod):
        tmp = [m for m in container["volumeMounts"] if m["mountPath"] == "/tmp"]
        if role_of(container) == "gitSync":
            assert tmp == [
                {"name": "git-sync-home", "mountPath": "/tmp", "subPath": tmp[0]["subPath"]}
            ]
            continue
        kebab = re.sub("([A-Z])", lambda m: "-" + m.group(1).lower(), role_of(container))
        assert [m["name"] for m in tmp] == [f"tmp-{kebab}"], container["name"]
    # replicate writes Litestream's config into its own /tmp, where only it writes.
    args = manifest.container("replicate")["args"]
    assert args[args.index("--work-dir") + 1] == "/tmp"


def test_the_backup_reads_the_data_volume_read_only_and_verify_not_at_all() -> None:
    manifest = render(EVERYTHING_CRONJOB)
    for where, pod in pod_specs(manifest):
        if "backup" not in [c["name"] for c in pod["containers"]]:
            continue
        backup = next(c for c in pod["containers"] if c["name"] == "backup")
        data = [m for m in backup["volumeMounts"] if m["name"] == "data"]
        if where == f"CronJob/{FULLNAME}-verify":
            assert data == [] and "data" not in {v["name"] for v in pod["volumes"]}
            assert "affinity" not in pod  # target s3: nothing ties it to the agent's node
            continue
        assert [m.get("readOnly") for m in data if m["mountPath"] == "/opt/data"] == [True]
    # In the agent pod too (sidecar mode), and read-write again only when asked.
    sidecar = render(EVERYTHING_SIDECAR).container("backup")
    assert {"name": "data", "mountPath": "/opt/data", "readOnly": True} in sidecar["volumeMounts"]
    writable = render({"backup": {"mode": "sidecar", "dataVolumeReadOnly": False}})
    mounts = writable.container("backup")["volumeMounts"]
    assert [m for m in mounts if m["name"] == "data"] == [
        {"name": "data", "mountPath": "/opt/data"}
    ]
    # verify keeps its node affinity only for a backup PVC (ReadWriteOnce, on the agent's node).
    pvc = render().one("CronJob", f"{FULLNAME}-verify")
    pvc_pod = pvc["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    assert "data" not in {v["name"] for v in pvc_pod["volumes"]}
    assert "podAffinity" in pvc_pod["affinity"]


@pytest.mark.parametrize("source", SOURCES, ids=SOURCE_IDS)
def test_each_consumer_has_its_own_service_account(source: Any) -> None:
    manifest = _render(source)
    accounts: dict[str, set[str]] = {}
    for where, pod in pod_specs(manifest):
        kind = "agent" if where.startswith(("Deployment/", "Pod/")) else where
        accounts.setdefault(pod["serviceAccountName"], set()).add(kind)
    agent = manifest.agent_pod["serviceAccountName"]
    assert accounts[agent] == {"agent"}, accounts
    for name, users in accounts.items():
        if name != agent:
            assert all(u != "agent" for u in users), (name, users)
    backup_pods = [w for w, _ in pod_specs(manifest) if "backup" in w or "verify" in w]
    for where, pod in pod_specs(manifest):
        if where in backup_pods or where.endswith("-pre-upgrade"):
            assert pod["serviceAccountName"] != agent, where


def test_backup_pods_log_in_to_vault_with_their_own_role() -> None:
    manifest = render(EVERYTHING_CRONJOB)

    def role(pod: dict) -> str:
        (render_container,) = [c for c in pod["initContainers"] if c["name"] == "vault-render"]
        args = render_container["args"]
        return str(args[args.index("--role") + 1])

    assert role(manifest.agent_pod) == "agent-role"
    for where, pod in pod_specs(manifest):
        if where.startswith(("CronJob/", "Job/")) and "secrets" not in where:
            assert role(pod) == "backup-role", where
            assert pod["serviceAccountName"] in (f"{FULLNAME}-backup", f"{FULLNAME}-pre-upgrade")
    # The pre-upgrade hook's identity is a hook too (made before the Job on every upgrade).
    hook = manifest.one("ServiceAccount", f"{FULLNAME}-pre-upgrade")
    assert hook["metadata"]["annotations"]["helm.sh/hook"] == "pre-upgrade"
    assert (
        manifest.one("ServiceAccount", f"{FULLNAME}-backup")["automountServiceAccountToken"]
        is False
    )


def test_values_that_would_merge_identities_are_refused() -> None:
    missing = render_error({**EVERYTHING_CRONJOB, "vault": {**VAULT, "backupRole": ""}})
    assert "vault.backupRole: required" in missing and f"{FULLNAME}-backup" in missing
    same = render_error({**EVERYTHING_CRONJOB, "vault": {**VAULT, "backupRole": "agent-role"}})
    assert "vault.backupRole" in same and "also vault.role" in same
    shared = {"backup": {"serviceAccount": {"create": False, "name": FULLNAME}}}
    assert "backup.serviceAccount.name" in render_error(shared)
    both_default = {
        "serviceAccount": {"create": False},
        "backup": {"serviceAccount": {"create": False}},
    }
    assert "also the agent pod's ServiceAccount" in render_error(both_default)
    # Vault variables for the agent alone: the backup pods log in nowhere, no backupRole needed.
    agent_only = {**VAULT, "backupRole": "", "secrets": VAULT["secrets"][:1]}
    assert render({"vault": agent_only}).has("CronJob")


@pytest.mark.parametrize(
    ("values", "field"),
    [
        ({"backup": {"containerSecurityContext": {"runAsUser": 10000}}}, "backup."),
        ({"vault": {"containerSecurityContext": {"runAsUser": 10004}}}, "restore."),
        ({"agent": {"containerSecurityContext": {"runAsUser": 65533}}}, "gitSync."),
        ({"allPods": {"podSecurityContext": {"runAsUser": 10002}}}, "backup.continuous."),
    ],
)
def test_two_roles_with_one_uid_are_refused(values: dict[str, Any], field: str) -> None:
    error = render_error(values)
    assert f"{field}containerSecurityContext.runAsUser: UID" in error, error


def test_a_user_chosen_agent_uid_is_kept() -> None:
    """Before each role had its own UID, allPods.podSecurityContext.runAsUser was everyone's:
    the agent keeps it (the data volume's files are its), the other roles keep their own."""
    manifest = render(
        {
            "allPods": {"podSecurityContext": {"runAsUser": 20000, "fsGroup": 20000}},
            "backup": {"mode": "sidecar"},
        }
    )
    pod = manifest.agent_pod
    assert uid_of(pod, manifest.container("agent")) == 20000
    assert uid_of(pod, manifest.container("backup")) == 10003


def test_a_repository_on_the_backup_volume_is_opened_to_the_group_first() -> None:
    """An earlier version wrote the repository as the agent's UID; the backup roles now have
    UIDs of their own and read it through the group. The opener holds no credential."""
    manifest = render({"backup": {"target": {"type": "pvc"}}})
    spec = manifest.backup_cronjob["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    (opener,) = [c for c in spec["initContainers"] if c["name"] == "repository-access"]
    assert "env" not in opener and "envFrom" not in opener
    assert [m["name"] for m in opener["volumeMounts"]] == ["backup"]
    assert "chmod g+rwX" in opener["args"][-1] and '-user "$(id -u)"' in opener["args"][-1]
    s3 = render({"backup": {"target": {"type": "s3", "s3": {"bucket": "backups"}}}})
    s3_spec = s3.backup_cronjob["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    assert "repository-access" not in [c["name"] for c in s3_spec.get("initContainers", [])]
