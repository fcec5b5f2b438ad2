"""Each of values-examples/{dev,staging,production}.yaml installed as its top comment documents.

For each example the test first creates what the comment's "Needs first" lists, in a fresh
namespace enforcing Pod Security "restricted": the Secrets (with the commands' key names), an
OpenAI-compatible endpoint (the fake LLM), the plugin repositories (the in-cluster git server,
over HTTP and over SSH with a deploy key and a pinned host key, each with the tag the example
pins), an S3 bucket (SeaweedFS), and Vault (an OpenBao dev server on TLS, configured as
docs/vault.md says, with the CA in Secret vault-ca). Then it runs `helm install hermes
charts/hermes-agent -f values-examples/<name>.yaml --wait` with only the overrides a user must
make anyway (`OVERRIDES` below: where the image, the model endpoint, the Git repositories, S3
and Vault are on this cluster), printed in the test log. The agent must be Ready, `helm test`
must pass with the example's NetworkPolicy, and a backup Job made from the CronJob must succeed
against the example's target.
"""

from __future__ import annotations

import copy
import json
import secrets
import subprocess
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from ruamel.yaml import YAML

from . import images, kube
from .test_network_policy import api_server_endpoint
from .test_scenario_vault import (
    install_openbao,
    openbao_client,
    openbao_token_reviewer,  # noqa: F401  (a fixture production requests by name)
)

CHART = kube.REPO_ROOT / "charts" / "hermes-agent"
EXAMPLES = kube.REPO_ROOT / "values-examples"
BACKENDS_CHART = Path(__file__).parent / "charts" / "ci-backends"
S3_CHART = Path(__file__).parent / "charts" / "s3-backend"
RELEASE = "hermes"  # every example's install command names the release hermes
FULLNAME = f"{RELEASE}-hermes-agent"
FAKE_LLM = "http://fake-llm:8080/v1"
FAKE_MODEL = "fake-model"
S3_ENDPOINT = "http://s3:8333"
VAULT_ADDRESS = "https://openbao:8200"  # tests/e2e/charts/openbao with tls=true
GIT_HTTP = "http://git-server:8080"
GIT_SSH_HOST = "git-server"  # sshd of tests/e2e/charts/ci-backends, port 22
# The repositories the in-cluster git server seeds (ci-backends `plugins`): name -> subPath.
SEEDED = {"weather": "", "tickets": "plugin"}


def plugin_files(name: str) -> dict[str, str]:
    return {
        "plugin.yaml": f'name: {name}\nversion: "1"\ndescription: values-examples e2e plugin\n',
        "__init__.py": "def register(ctx):\n    pass\n",
    }


@dataclass
class Setup:
    """What one example's preparation works with, and the overrides it collects."""

    cluster: kube.Cluster
    namespace: str
    helm: kube.Helm
    tmp_path: Path
    example: dict[str, Any]
    ssh_known_hosts: str = ""

    def write(self, name: str, values: dict[str, Any]) -> Path:
        path = self.tmp_path / name
        path.write_text(json.dumps(values))  # JSON is YAML
        return path

    def secret(self, name: str, data: dict[str, str]) -> None:
        """`kubectl create secret generic NAME --from-literal=...`, as the comments say."""
        body = client.V1Secret(metadata=client.V1ObjectMeta(name=name), string_data=data)
        self.cluster.core.create_namespaced_secret(self.namespace, body)


def load_example(name: str) -> dict[str, Any]:
    values: dict[str, Any] = YAML(typ="safe").load((EXAMPLES / f"{name}.yaml").read_text())
    return values


def common_overrides() -> dict[str, Any]:
    """Every example: the registry the image was pushed to, and the model endpoint.

    pullPolicy Always is the harness's: ci/build-images.sh may rebuild the same tag.
    """
    return {
        "image": {"registry": images.REGISTRY, "pullPolicy": images.PULL_POLICY},
        "llm": {"baseUrl": FAKE_LLM, "model": FAKE_MODEL},
    }


def git_sync_stand_in() -> dict[str, Any]:
    """registry.k8s.io cannot be reached here: the git-sync stand-in (docs/plugins.md)."""
    return {
        "image": {
            "registry": images.REGISTRY,
            "repository": images.repository("git-sync"),
            "tag": images.tag_of("git-sync"),
            "pullPolicy": images.PULL_POLICY,
        }
    }


def in_cluster_repo(plugin: dict[str, Any]) -> str:
    """The in-cluster git server's URL for a plugin, in the example's URL form."""
    name = plugin["name"]
    if plugin["repo"].startswith("git@"):
        return f"git@{GIT_SSH_HOST}:/srv/git/{name}.git"
    return f"{GIT_HTTP}/{name}.git"


def plugin_overrides(setup: Setup) -> list[dict[str, Any]]:
    """The example's plugin list with only `repo` (and the SSH host key) made ours.

    The whole list is given because Helm replaces lists rather than merging them.
    """
    plugins = copy.deepcopy(setup.example["plugins"])
    for plugin in plugins:
        plugin["repo"] = in_cluster_repo(plugin)
        if plugin.get("auth", {}).get("knownHosts"):
            plugin["auth"]["knownHosts"] = setup.ssh_known_hosts
    return plugins


def ssh_keypair(tmp_path: Path, name: str) -> tuple[str, str]:
    key = tmp_path / name
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", name, "-f", str(key)], check=True
    )
    return key.read_text(), key.with_suffix(".pub").read_text().strip()


def install_git_and_llm(setup: Setup, ssh_deploy_key: str = "") -> None:
    """The fake LLM and a git server holding the example's plugins, tagged at their `ref`.

    With `ssh_deploy_key` (a public key) the server also serves SSH; its generated host key
    goes into `setup.ssh_known_hosts` (what `ssh-keyscan` would print).
    """
    plugins = setup.example.get("plugins") or []
    seeded = {
        p["name"]: {"subPath": SEEDED[p["name"]], "files": plugin_files(p["name"])} for p in plugins
    }
    backends: dict[str, Any] = {
        "fakeLlm": {"image": images.ref("fake-llm")},
        "gitServer": {"image": images.ref("git-server")},
        "plugins": seeded or {"weather": {"subPath": "", "files": plugin_files("weather")}},
    }
    if ssh_deploy_key:
        host_private, host_public = ssh_keypair(setup.tmp_path, "git-server-host")
        backends["gitServer"]["ssh"] = {"hostKey": host_private, "authorizedKeys": ssh_deploy_key}
        key_type, key_body = host_public.split()[:2]
        setup.ssh_known_hosts = f"{GIT_SSH_HOST} {key_type} {key_body}\n"
    setup.helm.install(
        "backends", BACKENDS_CHART, [setup.write("backends.yaml", backends)], None, "3m"
    )
    tags = sorted({p["ref"] for p in plugins if p.get("ref", "main") != "main"})
    if tags:
        push_tags(setup, sorted(seeded), tags)


def push_tags(setup: Setup, repositories: list[str], tags: list[str]) -> None:
    """Tag each repository's main at `tags` (a release the example pins) and push them."""
    with kube.port_forward(setup.cluster, setup.namespace, "svc/git-server", 8080) as port:
        for name in repositories:
            work = setup.tmp_path / f"clone-{name}"
            git = ["git", "-c", "user.name=e2e", "-c", "user.email=e2e@localhost"]
            url = f"http://127.0.0.1:{port}/{name}.git"
            kube.run_checked([*git, "clone", "-q", url, str(work)], f"git clone {name}", 120)
            for tag in tags:
                kube.run_checked([*git, "-C", str(work), "tag", tag], f"git tag {tag}", 30)
            push = [*git, "-C", str(work), "push", "-q", "origin", *tags]
            kube.run_checked(push, f"git push {name} {tags}", 120)


def install_s3(setup: Setup, bucket: str) -> tuple[str, str]:
    """An S3-compatible server holding `bucket` (the example's); its random keys."""
    access_key = "AK" + secrets.token_hex(8).upper()
    secret_key = secrets.token_hex(20)
    values = {
        "image": images.ref("seaweedfs"),
        "bucket": bucket,
        "accessKey": access_key,
        "secretKey": secret_key,
    }
    setup.helm.install("s3", S3_CHART, [setup.write("s3.yaml", values)], timeout="3m")
    return access_key, secret_key


def prepare_dev(setup: Setup) -> dict[str, Any]:
    """dev.yaml: Secret hermes-llm and an OpenAI-compatible endpoint."""
    install_git_and_llm(setup)
    setup.secret("hermes-llm", {"api-key": "sk-" + secrets.token_hex(16)})
    return common_overrides()


def prepare_staging(setup: Setup) -> dict[str, Any]:
    """staging.yaml: four Secrets, S3, two plugin repositories (one over SSH), the host key."""
    deploy_private, deploy_public = ssh_keypair(setup.tmp_path, "deploy-key")
    bucket = setup.example["backup"]["target"]["s3"]["bucket"]
    with ThreadPoolExecutor(1) as pool:  # the servers start side by side
        s3_keys = pool.submit(install_s3, setup, bucket)
        install_git_and_llm(setup, ssh_deploy_key=deploy_public)
        access_key, secret_key = s3_keys.result()
    setup.secret("hermes-llm", {"api-key": "sk-" + secrets.token_hex(16)})
    setup.secret("hermes-api", {"api-key": secrets.token_hex(32)})
    setup.secret(
        "hermes-s3", {"AWS_ACCESS_KEY_ID": access_key, "AWS_SECRET_ACCESS_KEY": secret_key}
    )
    setup.secret("hermes-git-ssh", {"ssh": deploy_private})
    return {
        **common_overrides(),
        "gitSync": git_sync_stand_in(),
        "plugins": plugin_overrides(setup),
        "backup": {"target": {"s3": {"endpoint": S3_ENDPOINT}}},
    }


def prepare_production(setup: Setup) -> dict[str, Any]:
    """production.yaml: Vault (Kubernetes auth, KV v2), Secret vault-ca, S3, the plugin."""
    bucket = setup.example["backup"]["target"]["s3"]["bucket"]
    with ThreadPoolExecutor(2) as pool:  # the servers start side by side
        s3_keys = pool.submit(install_s3, setup, bucket)
        vault = pool.submit(
            install_openbao, setup.cluster, setup.namespace, setup.helm, setup.tmp_path, tls=True
        )
        install_git_and_llm(setup)
        access_key, secret_key = s3_keys.result()
        bao = vault.result()
    kv = {
        "hermes/prod": {
            "api_server_key": secrets.token_hex(32),
            "llm_api_key": "sk-" + secrets.token_hex(16),
        },
        "hermes/backup": {
            "access_key_id": access_key,
            "secret_access_key": secret_key,
            "restic_password": secrets.token_hex(32),
        },
    }
    with openbao_client(setup.cluster, setup.namespace, bao) as root:
        configure_vault(root, setup.namespace, setup.example["vault"], kv)
    return {
        **common_overrides(),
        "gitSync": git_sync_stand_in(),
        "plugins": plugin_overrides(setup),
        # premium-rwo does not exist here; "" is the cluster's default StorageClass.
        "persistence": {"storageClass": ""},
        # The test node has 2 CPUs shared with other tests: a 1-CPU request may not fit.
        "agent": {"resources": {"requests": {"cpu": "250m"}}},
        "backup": {"target": {"s3": {"endpoint": S3_ENDPOINT}}},
        "vault": {"address": VAULT_ADDRESS},
        "networkPolicy": {
            # "replace: kubectl get endpoints kubernetes -n default": the secrets Job's policy
            # reaches only these addresses, and is in place before the Job runs.
            "kubeApi": {"cidrs": [f"{api_server_endpoint(setup.cluster)[0]}/32"]},
            # The example names its endpoints by address (a VPC) and Vault by namespace
            # `vault`; here they are Services of the test's namespace: empty lists take the
            # peers of the URLs' hosts.
            "egress": {"llm": [], "git": [], "s3": [], "vault": []},
        },
    }


def configure_vault(
    bao: Any, namespace: str, vault: dict[str, Any], kv: dict[str, dict[str, str]]
) -> None:
    """What the production comment asks of the Vault team (docs/vault.md's commands).

    The Kubernetes auth method at vault.authPath; two roles with audience vault.audience, each
    with a policy of its own: vault.role bound to ServiceAccount hermes-hermes-agent reading the
    paths of the agent's variables, vault.backupRole bound to the backup pods' ServiceAccounts
    reading the paths of the backup's (AWS_*, RESTIC_PASSWORD: the chart's defaults by name);
    and the KV v2 secrets at the paths and keys vault.secrets lists.
    """
    mount, auth_path = "secret", vault["authPath"]
    listed = {(s["path"], s["key"]) for s in vault["secrets"]}
    planted = {(f"{mount}/data/{path}", key) for path, fields in kv.items() for key in fields}
    assert listed == planted, f"vault.secrets lists {listed}, the test plants {planted}"
    bao.sys.enable_auth_method("kubernetes", path=auth_path)
    bao.auth.kubernetes.configure(
        kubernetes_host="https://kubernetes.default.svc", mount_point=auth_path
    )
    backup_env = ("AWS_", "RESTIC_PASSWORD")
    backup_paths = {s["path"] for s in vault["secrets"] if s["env"].startswith(backup_env)}
    agent_paths = {s["path"] for s in vault["secrets"]} - backup_paths
    identities = [
        (vault["role"], [FULLNAME], agent_paths),
        (vault["backupRole"], [f"{FULLNAME}-backup", f"{FULLNAME}-pre-upgrade"], backup_paths),
    ]
    for role, accounts, paths in identities:
        policy = "".join(f'path "{p}" {{\n  capabilities = ["read"]\n}}\n' for p in sorted(paths))
        bao.sys.create_or_update_policy(role, policy)
        bao.auth.kubernetes.create_role(
            role,
            bound_service_account_names=accounts,
            bound_service_account_namespaces=[namespace],
            audience=vault["audience"],
            policies=[role],
            ttl="1h",
            mount_point=auth_path,
        )
    for path, fields in kv.items():
        bao.secrets.kv.v2.create_or_update_secret(path, secret=fields, mount_point=mount)


@dataclass(frozen=True)
class Example:
    name: str
    prepare: Callable[[Setup], dict[str, Any]]
    images: list[str]
    fixtures: tuple[str, ...] = ()


CASES = [
    Example("dev", prepare_dev, ["agent", "fake-llm", "git-server", "busybox"]),
    Example(
        "staging",
        prepare_staging,
        ["agent", "fake-llm", "git-server", "git-sync", "seaweedfs"],
    ),
    Example(
        "production",
        prepare_production,
        ["agent", "fake-llm", "git-server", "git-sync", "seaweedfs", "openbao"],
        fixtures=("openbao_token_reviewer",),
    ),
]


def assert_agent_ready(cluster: kube.Cluster, namespace: str) -> client.V1Pod:
    selector = f"app.kubernetes.io/instance={RELEASE},app.kubernetes.io/component=agent"
    pods = cluster.core.list_namespaced_pod(namespace, label_selector=selector).items
    live = [p for p in pods if p.metadata.deletion_timestamp is None]
    assert len(live) == 1, f"expected one agent pod: {[p.metadata.name for p in live]}"
    ready = [c.status for c in live[0].status.conditions or [] if c.type == "Ready"]
    assert ready == ["True"], f"agent pod not Ready: {live[0].status.conditions}"
    return live[0]


def assert_plugins_linked(
    cluster: kube.Cluster, namespace: str, pod: str, plugins: list[dict[str, Any]]
) -> None:
    """Each plugin's link resolves to the synced checkout (its plugin.yaml names it)."""
    for plugin in plugins:
        path = f"/opt/data/plugins/{plugin['name']}/plugin.yaml"
        shown = kube.exec_in_container(
            cluster, namespace, pod, "agent", ["cat", path], timeout=60, repeatable=True
        )
        assert shown.returncode == 0, f"{path}: {shown.stderr}"
        assert f"name: {plugin['name']}" in shown.stdout, shown.stdout


@pytest.mark.timeout(900)
@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_values_example_installs_as_documented(
    case: Example,
    cluster: kube.Cluster,
    namespace: str,
    helm: kube.Helm,
    tmp_path: Path,
    request: pytest.FixtureRequest,
) -> None:
    images.require(case.images)
    for fixture in case.fixtures:
        request.getfixturevalue(fixture)
    example = load_example(case.name)
    setup = Setup(cluster, namespace, helm, tmp_path, example)
    overrides = case.prepare(setup)
    print(f"{case.name}.yaml overrides:\n{json.dumps(overrides, indent=2)}")
    values = [EXAMPLES / f"{case.name}.yaml", setup.write("overrides.yaml", overrides)]
    helm.install(RELEASE, CHART, values=values, timeout="6m")

    pod = assert_agent_ready(cluster, namespace)
    assert_plugins_linked(cluster, namespace, pod.metadata.name, example.get("plugins") or [])
    helm.test(RELEASE)
    if example.get("backup", {}).get("enabled", True):
        job = kube.run_job_from_cronjob(cluster, namespace, f"{FULLNAME}-backup")
        print(f"{case.name}: backup job {job} succeeded")
