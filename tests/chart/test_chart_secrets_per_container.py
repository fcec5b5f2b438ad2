"""Each container gets only the secrets its own job needs (issue 28).

The agent container runs shell commands a language model chose: after a prompt
injection its shell is an attacker's. So it must hold the model key, its API key and
what values explicitly hand it, and never the S3 keys or the restic password (with
them it could delete every backup) nor git credentials. The backup, restore and
replication containers each read their own env file on their own in-memory volume.

How a container's secrets are found, whatever the chart's layout: env and envFrom
references to Secrets, mounted Secret volumes, and the Vault variables of every file a
`vault render` container writes onto a volume that container mounts (`--out FILE`:
every --secret; `--out-only FILE=NAMES`: those names).
"""

from __future__ import annotations

from typing import Any

import pytest
from chart_testlib import FULLNAME, all_containers, env_map, render, render_error

S3_KEYS = {"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"}
BACKUP_ONLY = S3_KEYS | {"RESTIC_PASSWORD"}
GIT_CREDENTIALS = {"GITSYNC_USERNAME", "GITSYNC_PASSWORD"}
AGENT_KEYS = {"LLM_API_KEY", "API_SERVER_KEY"}

S3_TARGET = {"type": "s3", "s3": {"bucket": "bkt", "region": "eu-west-3", "existingSecret": ""}}
VAULT = {
    "enabled": True,
    "address": "https://vault.example:8200",
    "role": "hermes",
    "backupRole": "hermes-backup",
    "secrets": [
        {"path": "secret/data/agent", "key": "llm", "env": "LLM_API_KEY"},
        {"path": "secret/data/agent", "key": "api", "env": "API_SERVER_KEY"},
        {"path": "secret/data/backup", "key": "id", "env": "AWS_ACCESS_KEY_ID"},
        {"path": "secret/data/backup", "key": "secret", "env": "AWS_SECRET_ACCESS_KEY"},
        {"path": "secret/data/backup", "key": "pw", "env": "RESTIC_PASSWORD"},
    ],
}
PLUGINS = [
    {"name": "weather", "repo": "https://git.example.com/w.git", "auth": {"existingSecret": "gc"}},
    {
        "name": "tickets",
        "repo": "git@git.example.com:t.git",
        "auth": {"sshKeySecret": "git-ssh", "knownHosts": "git.example.com ssh-ed25519 AAAA"},
    },
]


def _backup(mode: str, *, continuous: bool, s3: dict[str, Any] = S3_TARGET) -> dict[str, Any]:
    return {"enabled": True, "mode": mode, "target": s3, "continuous": {"enabled": continuous}}


S3_SECRET = {**S3_TARGET, "s3": {**S3_TARGET["s3"], "existingSecret": "s3-creds"}}
RESTORE = {"fromSnapshot": "latest"}

# name -> (values, examples): every way the chart hands out backup and git credentials.
VALUE_SETS: dict[str, tuple[dict[str, Any], tuple[str, ...]]] = {
    **{f"example {name}": ({}, (name,)) for name in ("dev", "staging", "production", "ci")},
    "vault, cronjob to s3": ({"vault": VAULT, "backup": _backup("cronjob", continuous=False)}, ()),
    "vault, cronjob, continuous, restore": (
        {"vault": VAULT, "backup": _backup("cronjob", continuous=True), "restore": RESTORE},
        (),
    ),
    "vault, sidecar, continuous, restore, refresher, plugins": (
        {
            "vault": {**VAULT, "refresher": {"enabled": True, "interval": 60}},
            "backup": _backup("sidecar", continuous=True),
            "restore": {**RESTORE, "fromReplicas": True},
            "plugins": PLUGINS,
        },
        (),
    ),
    "secrets, sidecar, continuous, restore, plugins": (
        {
            "backup": _backup("sidecar", continuous=True, s3=S3_SECRET),
            "restore": RESTORE,
            "plugins": PLUGINS,
        },
        (),
    ),
    "secrets, cronjob, continuous, restore": (
        {"backup": _backup("cronjob", continuous=True, s3=S3_SECRET), "restore": RESTORE},
        (),
    ),
}
LEGACY = "1.28.0"  # no native sidecars: the refresher, git-sync and replication are containers


def _vault_files(pod: dict) -> dict[str, tuple[str, set[str]]]:
    """Every file a `vault render` container of the pod writes: path -> (volume, names)."""
    files: dict[str, tuple[str, set[str]]] = {}
    for container in all_containers(pod):
        args = container.get("args", [])
        if args[:3] != ["hermes-runtime", "vault", "render"]:
            continue
        every = {args[i + 1].rsplit("=", 1)[1] for i, a in enumerate(args) if a == "--secret"}
        outputs: list[tuple[str, set[str]]] = []
        for i, arg in enumerate(args):
            if arg == "--out":
                outputs.append((args[i + 1], every))
            elif arg == "--out-only":
                path, _, names = args[i + 1].rpartition("=")
                outputs.append((path, set(filter(None, names.split(",")))))
        mounts = sorted(container["volumeMounts"], key=lambda m: -len(m["mountPath"]))
        for path, names in outputs:
            volume = next(m["name"] for m in mounts if path.startswith(m["mountPath"] + "/"))
            files[path] = (volume, files.get(path, ("", set()))[1] | names)
    return files


def _secret_volumes(pod: dict) -> set[str]:
    names = set()
    for volume in pod.get("volumes", []):
        sources = volume.get("projected", {}).get("sources", [])
        if "secret" in volume or any("secret" in s for s in sources):
            names.add(volume["name"])
    return names


def readable(pod: dict, container: dict) -> dict[str, set[str]]:
    """What the container can read: env names, Secret references, Vault variables, volumes."""
    mounted = {m["name"] for m in container.get("volumeMounts", [])}
    refs = {
        f"{item['valueFrom']['secretKeyRef']['name']}#{item['valueFrom']['secretKeyRef']['key']}"
        for item in container.get("env", [])
        if "secretKeyRef" in item.get("valueFrom", {})
    }
    refs |= {src["secretRef"]["name"] for src in container.get("envFrom", []) if "secretRef" in src}
    vault = set()
    for volume, names in _vault_files(pod).values():
        if volume in mounted:
            vault |= names
    return {
        "env": set(env_map(container)),
        "secret_refs": refs,
        "vault": vault,
        "secret_volumes": mounted & _secret_volumes(pod),
        "volumes": mounted,
    }


def _pods(values: dict[str, Any], examples: tuple[str, ...], kube: str) -> dict[str, dict]:
    manifest = render(values, examples=examples, **({"kube_version": kube} if kube else {}))
    pods = {"agent pod": manifest.agent_pod}
    for cron in manifest.all("CronJob"):
        pods["backup job"] = cron["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    return pods


@pytest.mark.parametrize("kube", ["", LEGACY])
@pytest.mark.parametrize("case", list(VALUE_SETS))
def test_the_agent_container_never_holds_backup_or_git_credentials(case: str, kube: str) -> None:
    values, examples = VALUE_SETS[case]
    pod = _pods(values, examples, kube)["agent pod"]
    agent = next(c for c in pod["containers"] if c["name"] == "agent")
    seen = readable(pod, agent)
    leaked = (seen["env"] | seen["vault"]) & (BACKUP_ONLY | GIT_CREDENTIALS)
    assert not leaked, f"the agent container can read {sorted(leaked)}"
    backup_secrets = {"s3-creds", f"{FULLNAME}-backup-password", "gc"}
    assert not {ref.split("#")[0] for ref in seen["secret_refs"]} & backup_secrets
    assert "envFrom" not in agent
    # Its own API key only, as a file (a Secret volume the kubelet keeps up to date).
    extra = set(seen["secret_volumes"]) - {"api-key"}
    assert not extra, f"the agent mounts Secret volumes {extra}"
    assert "backup" not in seen["volumes"]  # the backup PVC
    if "vault" in values:
        assert seen["vault"] == AGENT_KEYS


@pytest.mark.parametrize("kube", ["", LEGACY])
@pytest.mark.parametrize("case", [c for c in VALUE_SETS if c.startswith("vault")])
def test_each_backup_consumer_reads_only_its_own_file(case: str, kube: str) -> None:
    values, examples = VALUE_SETS[case]
    expected = {"backup": BACKUP_ONLY, "restore": BACKUP_ONLY, "replicate": S3_KEYS}
    files = {}
    for where, pod in _pods(values, examples, kube).items():
        volumes_of = {path: volume for path, (volume, _) in _vault_files(pod).items()}
        for container in all_containers(pod):
            name = container["name"]
            if name not in (*expected, "agent"):
                continue
            seen = readable(pod, container)
            assert seen["vault"] == expected.get(name, AGENT_KEYS), f"{name} in the {where}"
            own = {v for v in volumes_of.values() if v in seen["volumes"]}
            assert len(own) == 1, f"{name} in the {where} mounts the files of {sorted(own)}"
            assert (where, *own) not in files.values(), f"{name} shares {own} with another"
            files[(where, name)] = (where, *own)
            mount = next(m for m in container["volumeMounts"] if m["name"] in own)
            assert mount["readOnly"] is True
            assert env_map(container)["HERMES_RUNTIME_SECRETS_ENV"] == "/run/hermes/secrets/env"
            assert mount["mountPath"] == "/run/hermes/secrets"
        refresher = [c for c in all_containers(pod) if c["name"] == "vault-refresher"]
        if refresher:  # it keeps every file of the pod fresh, not only the agent's
            written = {
                path for path, (volume, _) in _vault_files({"containers": refresher}).items()
            }
            assert written == set(volumes_of)


def test_vault_renders_only_what_the_pod_needs() -> None:
    """The CronJob's render reads the backup's variables only; an agent pod with no
    consumer of a variable does not read it from Vault at all."""
    manifest = render({"vault": VAULT, "backup": _backup("cronjob", continuous=False)})
    cron = manifest.backup_cronjob["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    cron_files = _vault_files(cron)
    assert {v: n for v, n in cron_files.values()} == {"secrets-backup": BACKUP_ONLY}
    agent_files = _vault_files(manifest.agent_pod)
    assert {v: n for v, n in agent_files.values()} == {"secrets-agent": AGENT_KEYS}
    render_args = manifest.container("vault-render")["args"]
    assert not [a for a in render_args if "secret/data/backup" in a]


def test_a_pod_without_vault_variables_gets_no_vault_containers() -> None:
    """Vault only for the S3 keys, backups by CronJob: the agent pod has nothing to render."""
    only_s3 = {**VAULT, "secrets": VAULT["secrets"][2:4]}
    manifest = render({"vault": only_s3, "backup": _backup("cronjob", continuous=False)})
    pod = manifest.agent_pod
    assert not [c["name"] for c in all_containers(pod) if c["name"].startswith("vault")]
    assert not [v["name"] for v in pod["volumes"] if v["name"].startswith(("secrets", "vault"))]
    assert "HERMES_RUNTIME_SECRETS_ENV" not in env_map(manifest.container("agent"))
    # And a CronJob whose container gets nothing from Vault renders nothing either.
    agent_only = {**VAULT, "secrets": VAULT["secrets"][:2]}
    cron = render({"vault": agent_only}).backup_cronjob["spec"]["jobTemplate"]["spec"]
    init = cron["template"]["spec"].get("initContainers", [])
    assert not [c["name"] for c in init if c["name"].startswith("vault")], init


def test_for_hands_a_variable_to_exactly_the_containers_named() -> None:
    secrets = [
        {"path": "secret/data/a", "key": "gh", "env": "GITHUB_TOKEN", "for": ["backup"]},
        {"path": "secret/data/a", "key": "k", "env": "AWS_BEDROCK_KEY", "for": ["agent"]},
        {"path": "secret/data/a", "key": "llm", "env": "LLM_API_KEY"},
    ]
    values = {
        "vault": {**VAULT, "secrets": secrets},
        "backup": _backup("sidecar", continuous=True, s3=S3_SECRET),
    }
    manifest = render(values)
    pod = manifest.agent_pod
    assert readable(pod, manifest.container("agent"))["vault"] == {"AWS_BEDROCK_KEY", "LLM_API_KEY"}
    assert readable(pod, manifest.container("backup"))["vault"] == {"GITHUB_TOKEN"}
    assert "replicate" not in [v for v, _ in _vault_files(pod).values()]
    assert "HERMES_RUNTIME_SECRETS_ENV" not in env_map(manifest.container("replicate"))


def test_an_unknown_consumer_is_refused_by_the_schema() -> None:
    secret = {"path": "secret/data/a", "key": "k", "env": "X", "for": ["agent", "git-sync"]}
    error = render_error({"vault": {**VAULT, "secrets": [secret]}})
    assert "/vault/secrets/0/for/1" in error
    assert "agent" in error and "replicate" in error  # the allowed values are listed


@pytest.mark.parametrize(
    ("route", "values", "missing"),
    [
        (["backup"], {"restore": RESTORE}, "not `for` restore while restore.fromSnapshot is set"),
        (["restore"], {}, "not `for` backup while backup.enabled is set"),
    ],
)
def test_a_vault_restic_password_must_reach_each_container_opening_the_repository(
    route: list[str], values: dict[str, Any], missing: str
) -> None:
    secrets = [{"path": "secret/data/b", "key": "pw", "env": "RESTIC_PASSWORD", "for": route}]
    error = render_error({"vault": {**VAULT, "secrets": secrets}, **values})
    assert f"vault.secrets: RESTIC_PASSWORD is rendered from Vault but {missing}" in error


def _split_s3_keys() -> list[dict[str, Any]]:
    """The backup job's own S3 keys, and other ones for restore and replication."""
    return [
        *VAULT["secrets"][:2],
        {
            "path": "secret/data/s3-backup",
            "key": "id",
            "env": "AWS_ACCESS_KEY_ID",
            "for": ["backup"],
        },
        {
            "path": "secret/data/s3-read",
            "key": "id",
            "env": "AWS_ACCESS_KEY_ID",
            "for": ["restore", "replicate"],
        },
    ]


def test_the_backup_job_may_take_its_own_s3_keys_from_another_path() -> None:
    """Least privilege per consumer (docs/backup.md): the CronJob's render reads one key
    pair, the agent pod's render (restore, replication) another."""
    values = {
        "vault": {**VAULT, "secrets": _split_s3_keys()},
        "backup": _backup("cronjob", continuous=True),
        "restore": RESTORE,
    }
    manifest = render(values)
    cron = manifest.backup_cronjob["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    cron_args = next(c for c in cron["initContainers"] if c["name"] == "vault-render")["args"]
    assert "secret/data/s3-backup#id=AWS_ACCESS_KEY_ID" in cron_args
    assert not [a for a in cron_args if "s3-read" in a]
    pod_args = manifest.container("vault-render")["args"]
    assert "secret/data/s3-read#id=AWS_ACCESS_KEY_ID" in pod_args
    assert not [a for a in pod_args if "s3-backup" in a]


@pytest.mark.parametrize(
    ("secrets", "backup", "message"),
    [
        (
            [*VAULT["secrets"], {"path": "secret/data/x", "key": "k", "env": "AWS_ACCESS_KEY_ID"}],
            _backup("cronjob", continuous=False),
            "vault.secrets[5].env: AWS_ACCESS_KEY_ID is already filled by vault.secrets[2] for "
            "backup, restore, replicate",
        ),
        (
            _split_s3_keys(),
            _backup("sidecar", continuous=True),
            "vault.secrets[3].env: AWS_ACCESS_KEY_ID is also filled by vault.secrets[2], and both "
            "are needed in the agent pod (for replicate and backup)",
        ),
    ],
)
def test_one_variable_gets_one_value_per_container_and_per_pod(
    secrets: list[dict[str, Any]], backup: dict[str, Any], message: str
) -> None:
    assert message in render_error({"vault": {**VAULT, "secrets": secrets}, "backup": backup})
