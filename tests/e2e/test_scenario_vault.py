"""Scenario 6: the agent's secrets come from OpenBao through Kubernetes auth.

OpenBao (tests/e2e/charts/openbao, a dev server) runs in the scenario's
namespace as ServiceAccount `openbao`, bound to `system:auth-delegator` so it
can ask the cluster's API to review tokens (TokenReview). The test configures
it the way docs/vault.md tells a platform team to: the Kubernetes auth method
against https://kubernetes.default.svc, a policy reading the KV v2 paths, and a
role bound to the chart's ServiceAccount in this namespace with the chart's
audience. It plants a random model key and API server key there.

The hermes-agent release (values-examples/ci.yaml + `vault.*`) must then
become Ready with both keys from Vault: the fake LLM received exactly the
planted model key (its GET /_auth), and the API server accepts only the
planted API key. Neither value appears in any ConfigMap, pod spec, container
log, the release's manifest or under /opt/data (the backed-up volume). A second
release with a wrong `vault.role`, and a third whose ServiceAccount the role
does not bind, do not start: their `vault-render` init containers exit 1 with
a log naming the role, the auth path and the cause.

Two more tests reuse that setup: the backup CronJob takes its S3 credentials
from Vault (no existingSecret) and writes a snapshot to the in-namespace
SeaweedFS; and with the refresher sidecar on, a model key rotated in OpenBao
reaches the running agent (gateway restarted in place, same pod).
"""

from __future__ import annotations

import base64
import contextlib
import json
import secrets
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import hvac
import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException
from support.restic import pinned_restic

from . import images, kube

CHART = kube.REPO_ROOT / "charts" / "hermes-agent"
CI_VALUES = images.ci_values()  # values-examples/ci.yaml, pulling from the registry
BACKENDS_CHART = Path(__file__).parent / "charts" / "ci-backends"
OPENBAO_CHART = Path(__file__).parent / "charts" / "openbao"
IMAGES = [
    "agent",
    "fake-llm",
    "git-server",
    "openbao",
]
RELEASE = "hermes"
WRONG_RELEASE = "wrong"  # a role that does not exist
UNBOUND_RELEASE = "unbound"  # ServiceAccount unbound-hermes-agent: not bound to ROLE
# The chart's ServiceAccount for release "hermes" (<release>-hermes-agent).
SERVICE_ACCOUNT = "hermes-hermes-agent"
OPENBAO_SERVICE_ACCOUNT = "openbao"  # tests/e2e/charts/openbao
REVIEWER_LABEL = "hermes-runtime/e2e"  # on the cluster-scoped bindings this file creates
VAULT_ADDR = "http://openbao:8200"
OPENBAO_CA = "/tmp/tls/vault-ca.pem"  # tests/e2e/charts/openbao with tls=true
VAULT_CA_SECRET = "vault-ca"  # the chart's vault.caSecret (key ca.crt) in the TLS test
AUTH_PATH = "kubernetes"
AUDIENCE = "vault"  # the chart's default vault.audience
ROLE = "hermes-agent"  # the agent pod's (vault.role)
WRONG_ROLE = "no-such-role"
POLICY = "hermes-agent"
# The backup pods' own role and policy (vault.backupRole), bound to their own ServiceAccounts:
# the agent pod's role cannot read BACKUP_PATH, the backup's cannot read the agent's paths.
BACKUP_ROLE = "hermes-agent-backup"
BACKUP_POLICY = "hermes-backup"
BACKUP_SERVICE_ACCOUNTS = ["hermes-hermes-agent-backup", "hermes-hermes-agent-pre-upgrade"]
KV_MOUNT = "secret"  # the dev server's KV v2 mount
AGENT_PATH = "hermes/agent"  # KV v2 paths (the API path adds data/)
BACKUP_PATH = "hermes/backup"
S3_CHART = Path(__file__).parent / "charts" / "s3-backend"
BUCKET = "backups"  # what the s3-backend chart creates
S3_PREFIX = "hermes"
HERMES_RUNTIME = Path(sys.executable).parent / "hermes-runtime"
API_PORT = 8642


def write_values(tmp_path: Path, name: str, values: dict[str, Any]) -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(values))  # JSON is valid YAML; 0600 is not needed: tmp_path
    return path


def vault_values(
    role: str, kv: dict[str, list[str]], address: str = VAULT_ADDR, ca_secret: str = ""
) -> dict[str, Any]:
    """What a user puts in values.yaml: where Vault is and which paths to read; no value.

    `kv` maps a KV v2 path to the keys read from it (each key becomes the env var).
    """
    entries = [
        {"path": f"{KV_MOUNT}/data/{path}", "key": key, "env": key}
        for path, keys in kv.items()
        for key in keys
    ]
    # One source per secret: ci.yaml's apiServer.key gives way when Vault fills the API key.
    from_vault = {entry["env"] for entry in entries}
    api_server = {"apiServer": {"key": ""}} if "API_SERVER_KEY" in from_vault else {}
    return {
        **api_server,
        "vault": {
            "enabled": True,
            "address": address,
            "role": role,
            "backupRole": BACKUP_ROLE,
            "authPath": AUTH_PATH,
            "audience": AUDIENCE,
            "caSecret": ca_secret,
            "secrets": entries,
        },
        "tests": {"enabled": False},
    }


@dataclass(frozen=True)
class OpenBao:
    """The in-namespace server as the test reaches it: root token, its CA when on TLS."""

    root_token: str
    ca_file: Path | None = None

    @property
    def address(self) -> str:
        """The address the chart is given (cluster DNS)."""
        return "https://openbao:8200" if self.ca_file else VAULT_ADDR


def install_openbao(
    cluster: kube.Cluster, namespace: str, helm: kube.Helm, tmp_path: Path, tls: bool = False
) -> OpenBao:
    """The in-namespace OpenBao dev server with a random root token.

    With `tls`, its generated dev CA is copied out of the pod into a local file
    (for the test's client) and into the Secret VAULT_CA_SECRET (for the chart).
    """
    root_token = secrets.token_hex(16)
    values = write_values(tmp_path, "openbao.yaml", {"rootToken": root_token, "tls": tls})
    helm.install("openbao", OPENBAO_CHART, values=[values], timeout="3m")
    if not tls:
        return OpenBao(root_token)
    ca = kube.kubectl(cluster, namespace, "exec", "deploy/openbao", "--", "cat", OPENBAO_CA)
    assert "BEGIN CERTIFICATE" in ca, f"no CA certificate at {OPENBAO_CA}: {ca[:200]!r}"
    ca_file = tmp_path / "openbao-ca.pem"
    ca_file.write_text(ca)
    secret = client.V1Secret(
        metadata=client.V1ObjectMeta(name=VAULT_CA_SECRET), string_data={"ca.crt": ca}
    )
    cluster.core.create_namespaced_secret(namespace, secret)
    return OpenBao(root_token, ca_file)


@contextlib.contextmanager
def openbao_client(cluster: kube.Cluster, namespace: str, bao: OpenBao) -> Iterator[hvac.Client]:
    """A root-token client through a port-forward (the dev certificate names 127.0.0.1)."""
    with kube.port_forward(cluster, namespace, "svc/openbao", 8200) as port:
        if bao.ca_file is None:
            yield hvac.Client(url=f"http://127.0.0.1:{port}", token=bao.root_token)
        else:
            url = f"https://127.0.0.1:{port}"
            yield hvac.Client(url=url, token=bao.root_token, verify=str(bao.ca_file))


@pytest.fixture
def openbao_token_reviewer(cluster: kube.Cluster, namespace: str) -> Iterator[str]:
    """ClusterRoleBinding system:auth-delegator -> the namespace's `openbao` account.

    Cluster-scoped, so named after the namespace and deleted here (deleting the
    namespace would leave it behind). Bindings left by an interrupted run (their
    namespace is gone) are swept first.
    """
    rbac = client.RbacAuthorizationV1Api(cluster.api)
    delete_orphaned_token_reviewers(cluster, rbac)
    name = f"{namespace}-openbao-tokenreview"
    body = client.V1ClusterRoleBinding(
        metadata=client.V1ObjectMeta(name=name, labels={REVIEWER_LABEL: "vault"}),
        role_ref=client.V1RoleRef(
            api_group="rbac.authorization.k8s.io", kind="ClusterRole", name="system:auth-delegator"
        ),
        subjects=[
            client.RbacV1Subject(
                kind="ServiceAccount", name=OPENBAO_SERVICE_ACCOUNT, namespace=namespace
            )
        ],
    )
    rbac.create_cluster_role_binding(body)
    try:
        yield name
    finally:
        delete_cluster_role_binding(rbac, name)


def delete_cluster_role_binding(rbac: client.RbacAuthorizationV1Api, name: str) -> None:
    try:
        rbac.delete_cluster_role_binding(name)
    except ApiException as exc:
        if exc.status != 404:
            raise


def delete_orphaned_token_reviewers(
    cluster: kube.Cluster, rbac: client.RbacAuthorizationV1Api
) -> None:
    """Delete the bindings whose namespace is gone (left by an interrupted run).

    Bindings are listed before namespaces: a test running in parallel (pytest -n) creates
    its namespace before its binding, so every binding in the first list has its namespace
    in the second one until that test deletes both, and only true orphans are swept.
    """
    bindings = rbac.list_cluster_role_binding(label_selector=f"{REVIEWER_LABEL}=vault").items
    namespaces = {ns.metadata.name for ns in cluster.core.list_namespace().items}
    for binding in bindings:
        if not {s.namespace for s in binding.subjects or []} & namespaces:
            delete_cluster_role_binding(rbac, binding.metadata.name)


def configure_openbao(
    bao: hvac.Client, namespace: str, service_account: str, kv: dict[str, dict[str, str]]
) -> None:
    """The platform team's steps (docs/vault.md "Tested end to end"), via the HTTP API.

    `kv` maps each KV v2 path to the fields planted there. Two roles with two policies: the
    agent pod's (`service_account`) reads every path but BACKUP_PATH, the backup pods' reads
    BACKUP_PATH alone.
    """
    bao.sys.enable_auth_method("kubernetes", path=AUTH_PATH)
    # In a pod OpenBao reads its own ServiceAccount token and the cluster CA.
    bao.auth.kubernetes.configure(
        kubernetes_host="https://kubernetes.default.svc", mount_point=AUTH_PATH
    )
    identities = [
        (ROLE, POLICY, [service_account], [path for path in kv if path != BACKUP_PATH]),
        (BACKUP_ROLE, BACKUP_POLICY, BACKUP_SERVICE_ACCOUNTS, [BACKUP_PATH]),
    ]
    for role, policy, accounts, paths in identities:
        rules = "".join(
            f'path "{KV_MOUNT}/data/{path}" {{\n  capabilities = ["read"]\n}}\n' for path in paths
        )
        bao.sys.create_or_update_policy(policy, rules)
        bao.auth.kubernetes.create_role(
            role,
            bound_service_account_names=accounts,
            bound_service_account_namespaces=[namespace],
            audience=AUDIENCE,
            policies=[policy],
            ttl="1h",
            mount_point=AUTH_PATH,
        )
    for path, fields in kv.items():
        bao.secrets.kv.v2.create_or_update_secret(path, secret=fields, mount_point=KV_MOUNT)


def set_up_openbao(
    cluster: kube.Cluster, namespace: str, bao: OpenBao, kv: dict[str, dict[str, str]]
) -> None:
    with openbao_client(cluster, namespace, bao) as root:
        configure_openbao(root, namespace, SERVICE_ACCOUNT, kv)


def chat(base: str, key: str, text: str) -> httpx.Response:
    body = {"model": "fake-model", "messages": [{"role": "user", "content": text}]}
    return httpx.post(
        f"{base}/v1/chat/completions",
        json=body,
        headers={"Authorization": f"Bearer {key}"},
        timeout=120,
    )


def agent_selector(release: str) -> str:
    return f"app.kubernetes.io/instance={release},app.kubernetes.io/component=agent"


def live_pods(cluster: kube.Cluster, namespace: str, release: str) -> list[client.V1Pod]:
    pods = cluster.core.list_namespaced_pod(namespace, label_selector=agent_selector(release))
    return [p for p in pods.items if p.metadata.deletion_timestamp is None]


def only_pod(cluster: kube.Cluster, namespace: str, release: str) -> client.V1Pod:
    live = live_pods(cluster, namespace, release)
    assert len(live) == 1, f"expected one agent pod of {release}: {[p.metadata.name for p in live]}"
    return live[0]


def agent_service(cluster: kube.Cluster, namespace: str) -> str:
    services = cluster.core.list_namespaced_service(
        namespace, label_selector=agent_selector(RELEASE)
    ).items
    assert len(services) == 1, f"expected one agent Service: {[s.metadata.name for s in services]}"
    return str(services[0].metadata.name)


def chat_with_vault_keys(cluster: kube.Cluster, namespace: str, api_key: str) -> None:
    """A turn with the Vault-held API key is answered; a wrong key is refused."""
    text = f"hello from the vault scenario {secrets.token_hex(4)}"
    service = f"svc/{agent_service(cluster, namespace)}"
    with kube.port_forward(cluster, namespace, service, API_PORT) as port:
        base = f"http://127.0.0.1:{port}"
        answer = kube.with_transport_retries("chat", lambda: chat(base, api_key, text))
        assert answer.status_code == 200, f"chat failed: {answer.status_code} {answer.text}"
        reply = answer.json()["choices"][0]["message"]["content"]
        assert text in reply, f"unexpected reply {reply!r}"
        refused = kube.with_transport_retries("chat", lambda: chat(base, "not-the-key-" * 3, text))
        assert refused.status_code == 401, (
            f"the API server accepted a key that is not the one in Vault: {refused.status_code}"
        )


def keys_the_llm_received(cluster: kube.Cluster, namespace: str) -> list[str | None]:
    with kube.port_forward(cluster, namespace, "svc/fake-llm", 8080) as port:
        url = f"http://127.0.0.1:{port}/_auth"
        response = kube.with_transport_retries("fake LLM", lambda: httpx.get(url, timeout=30))
    assert response.status_code == 200, response.text
    return list(response.json()["authorization"])


def everything_rendered_in_namespace(cluster: kube.Cluster, namespace: str) -> str:
    """ConfigMaps and pod specs (commands, args, env values) as one JSON text."""
    serialize = cluster.api.sanitize_for_serialization
    config_maps = cluster.core.list_namespaced_config_map(namespace).items
    pods = cluster.core.list_namespaced_pod(namespace).items
    return json.dumps(
        {
            "configmaps": [serialize(c) for c in config_maps],
            "pod_specs": [serialize(p.spec) for p in pods],
        }
    )


def container_logs(cluster: kube.Cluster, namespace: str, pod: client.V1Pod) -> str:
    names = [c.name for c in (pod.spec.init_containers or []) + pod.spec.containers]
    return "\n".join(kube.pod_log(cluster, namespace, pod.metadata.name, name) for name in names)


def agent_exec(
    cluster: kube.Cluster,
    namespace: str,
    pod: str,
    command: list[str],
    stdin: str = "",
    *,
    repeatable: bool = False,
) -> subprocess.CompletedProcess[str]:
    """Run in the agent container; values travel on stdin, never as arguments.
    ``repeatable``: running it again is harmless (kube.exec_in_container)."""
    return kube.exec_in_container(
        cluster, namespace, pod, "agent", command, stdin, timeout=120, repeatable=repeatable
    )


def assert_values_nowhere(
    cluster: kube.Cluster, namespace: str, helm: kube.Helm, values: list[str]
) -> None:
    """No planted value in ConfigMaps, pod specs, logs, the release manifest or /opt/data."""
    rendered = everything_rendered_in_namespace(cluster, namespace)
    pod = only_pod(cluster, namespace, RELEASE)
    logs = container_logs(cluster, namespace, pod)
    assert "vault.rendered" in logs, "the vault-render init container logged no render"
    manifest = helm.run("get", "all", RELEASE)
    for value in values:
        assert value not in rendered, "a Vault value is in a ConfigMap or a pod spec"
        assert value not in logs, "a Vault value is in a container log"
        assert value not in manifest, "a Vault value is in the helm release"
    # grep reads the values as patterns from stdin: exit 1 means no file holds any.
    found = agent_exec(
        cluster,
        namespace,
        pod.metadata.name,
        ["grep", "-rlF", "-f", "-", "/opt/data"],
        stdin="\n".join(values) + "\n",
    )
    assert found.returncode == 1, (
        f"a Vault value is under /opt/data (backed up): {found.stdout} {found.stderr}"
    )
    # Written by the Vault containers' UID, read by the agent's through the pod's group.
    env_file = agent_exec(
        cluster, namespace, pod.metadata.name, ["stat", "-c", "%a %u", "/run/hermes/secrets/env"]
    )
    mode_owner = env_file.stdout.split()
    assert mode_owner[:1] == ["640"] and mode_owner[1:] != ["10000"], (
        f"env file mode and owner: {env_file.stdout} {env_file.stderr}"
    )


def render_failure(cluster: kube.Cluster, namespace: str, release: str) -> tuple[int, str]:
    """Wait for the release's vault-render init container to fail; its exit code and log."""
    seen: dict[str, Any] = {}

    def failed() -> bool:
        pods = live_pods(cluster, namespace, release)
        if not pods:  # the Deployment creates it a moment after `helm install` returns
            return False
        (pod,) = pods
        statuses = pod.status.init_container_statuses or []
        for status in statuses:
            if status.name != "vault-render":
                continue
            for previous, state in ((False, status.state), (True, status.last_state)):
                if state is not None and state.terminated is not None:
                    seen.update(pod=pod, previous=previous, code=state.terminated.exit_code)
                    return True
        return False

    kube.wait_until(failed, 180, f"the vault-render init container of {release} to exit")
    pod = seen["pod"]
    log = failed_run_log(cluster, namespace, pod.metadata.name, seen["previous"])
    agent = [s for s in pod.status.container_statuses or [] if s.name == "agent"]
    assert not any(s.state.running for s in agent), "the agent started without its secrets"
    return int(seen["code"]), log


def failed_run_log(cluster: kube.Cluster, namespace: str, pod: str, previous: bool) -> str:
    """The log of a vault-render run that failed: the one with its `error:` line.

    Why two reads: the kubelet restarts a failed init container (with back-off). Between the
    status that showed it terminated and the log read, the next run may have started: the
    current log is then that run's (empty, once in CI), and the failed one is `previous`.
    Every run fails the same way, so either failed run's log will do.
    """
    log = ""
    for which in dict.fromkeys((previous, True)):
        with contextlib.suppress(ApiException):  # no previous run yet
            log = kube.pod_log(cluster, namespace, pod, "vault-render", previous=which)
        if "error:" in log:
            break
    return log


@pytest.mark.timeout(900)
def test_agent_gets_its_keys_from_openbao_through_kubernetes_auth(
    cluster: kube.Cluster,
    namespace: str,
    helm: kube.Helm,
    tmp_path: Path,
    openbao_token_reviewer: str,
) -> None:
    images.require(IMAGES)
    bao = install_openbao(cluster, namespace, helm, tmp_path)
    helm.install("backends", BACKENDS_CHART, timeout="3m")

    model_key = "sk-vault-" + secrets.token_hex(16)
    api_key = "api-vault-" + secrets.token_hex(16)
    planted = {"LLM_API_KEY": model_key, "API_SERVER_KEY": api_key}
    set_up_openbao(cluster, namespace, bao, {AGENT_PATH: planted})

    agent_values = write_values(
        tmp_path, "vault.yaml", vault_values(ROLE, {AGENT_PATH: [*planted]})
    )
    helm.install(RELEASE, CHART, values=[CI_VALUES, agent_values], timeout="5m")
    pod = only_pod(cluster, namespace, RELEASE)
    assert pod.spec.service_account_name == SERVICE_ACCOUNT, pod.spec.service_account_name
    chat_with_vault_keys(cluster, namespace, api_key)

    received = keys_the_llm_received(cluster, namespace)
    assert received, "the fake LLM received no request"
    assert set(received) == {f"Bearer {model_key}"}, (
        f"the fake LLM received other keys than the one planted in Vault ({len(received)} requests)"
    )
    print(f"the fake LLM saw the Vault model key on all {len(received)} requests")
    assert_values_nowhere(cluster, namespace, helm, [model_key, api_key])

    # Two releases that must not start, installed together (their pods fail in parallel).
    failures = {
        WRONG_RELEASE: (WRONG_ROLE, [f"role '{WRONG_ROLE}'", "invalid role name"]),
        # The right role, but this release's ServiceAccount is not bound to it.
        UNBOUND_RELEASE: (ROLE, [f"role '{ROLE}'", "service account name not authorized"]),
    }
    for release, (role, _) in failures.items():
        install_failing_release(helm, tmp_path, release, role, [*planted])
    for release, (_, expected) in failures.items():
        code, log = render_failure(cluster, namespace, release)
        print(f"{release}: vault-render exited {code}: {log.strip().splitlines()[-1:]}")
        assert code == 1, f"vault-render of {release} exited {code}; log:\n{log}"
        for fragment in [*expected, f"auth path 'auth/{AUTH_PATH}'", VAULT_ADDR]:
            assert fragment in log, f"{fragment!r} not in the log of {release}:\n{log}"
        for value in (model_key, api_key, bao.root_token):
            assert value not in log, f"a secret value is in the log of {release}"


def install_failing_release(
    helm: kube.Helm, tmp_path: Path, release: str, role: str, keys: list[str]
) -> None:
    """A release expected never to start (no --wait); small: no PVCs, no backup."""
    values = vault_values(role, {AGENT_PATH: keys})
    values.update(persistence={"enabled": False}, backup={"enabled": False})
    path = write_values(tmp_path, f"{release}.yaml", values)
    helm.run("install", release, str(CHART), "--values", str(CI_VALUES), "--values", str(path))


def run_backup_job(cluster: kube.Cluster, namespace: str) -> client.V1Pod:
    """`kubectl create job --from=cronjob/...` (what an operator does); its finished pod."""
    batch = client.BatchV1Api(cluster.api)
    cronjob = f"{RELEASE}-hermes-agent-backup"  # by name: the verify CronJob has its labels
    job = kube.unique_name("backup-now")
    kube.kubectl(cluster, namespace, "create", "job", job, f"--from=cronjob/{cronjob}")

    def finished() -> bool:
        status = batch.read_namespaced_job_status(job, namespace).status
        assert not status.failed, f"backup job {job} failed: {status.conditions}"
        return bool(status.succeeded)

    kube.wait_until(finished, 300, f"backup job {job} to succeed")
    (pod,) = cluster.core.list_namespaced_pod(namespace, label_selector=f"job-name={job}").items
    return pod


def listed_snapshots(
    port: int, access_key: str, secret_key: str, password: str, agent: str
) -> list[dict[str, Any]]:
    """The .venv's `backup list` against the forwarded S3; credentials only in its env."""
    env = {
        "PATH": "/usr/bin:/bin",
        "AWS_ACCESS_KEY_ID": access_key,
        "AWS_SECRET_ACCESS_KEY": secret_key,
        "AWS_REGION": "us-east-1",
        "RESTIC_PASSWORD": password,  # the repository's, from the Secret the chart keeps
        "HERMES_RUNTIME_AGENT": agent,  # the chart's name for the release's agent
        "HERMES_RUNTIME_RESTIC": str(pinned_restic()),  # no restic on a fresh machine's PATH
    }
    cmd = [
        str(HERMES_RUNTIME),
        "backup",
        "list",
        "--target",
        f"s3://{BUCKET}/{S3_PREFIX}",
        "--s3-endpoint",
        f"http://127.0.0.1:{port}",
        "--json",
    ]
    result = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=120)
    assert result.returncode == 0, f"backup list failed: {result.stderr}"
    return list(json.loads(result.stdout))


def s3_values_without_credentials() -> dict[str, Any]:
    """Backup to the in-namespace S3 with no existingSecret: credentials come from Vault."""
    s3 = {
        "bucket": BUCKET,
        "prefix": S3_PREFIX,
        "endpoint": "http://s3:8333",
        "region": "us-east-1",
        "existingSecret": "",
    }
    return {"backup": {"enabled": True, "mode": "cronjob", "target": {"type": "s3", "s3": s3}}}


def install_backends_and_s3(helm: kube.Helm, tmp_path: Path) -> dict[str, str]:
    """The CI backends and the in-namespace S3 (``S3_CHART``) with fresh random keys: the
    keys as the backup containers' variables (``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``),
    for a test to plant in Vault."""
    helm.install("backends", BACKENDS_CHART, timeout="3m")
    access_key = "AK" + secrets.token_hex(8).upper()
    secret_key = secrets.token_hex(20)
    s3_server = write_values(
        tmp_path, "s3.yaml", {"bucket": BUCKET, "accessKey": access_key, "secretKey": secret_key}
    )
    helm.install("s3", S3_CHART, values=[s3_server], timeout="3m")
    return {"AWS_ACCESS_KEY_ID": access_key, "AWS_SECRET_ACCESS_KEY": secret_key}


@pytest.mark.timeout(900)
def test_backup_cronjob_takes_its_s3_credentials_from_openbao(
    cluster: kube.Cluster,
    namespace: str,
    helm: kube.Helm,
    tmp_path: Path,
    openbao_token_reviewer: str,
) -> None:
    images.require([*IMAGES, "seaweedfs"])
    bao = install_openbao(cluster, namespace, helm, tmp_path)
    backup = install_backends_and_s3(helm, tmp_path)
    access_key, secret_key = backup["AWS_ACCESS_KEY_ID"], backup["AWS_SECRET_ACCESS_KEY"]

    model_key = "sk-vault-" + secrets.token_hex(16)
    agent = {"LLM_API_KEY": model_key}
    set_up_openbao(cluster, namespace, bao, {AGENT_PATH: agent, BACKUP_PATH: backup})

    values = vault_values(ROLE, {AGENT_PATH: [*agent], BACKUP_PATH: [*backup]})
    values.update(s3_values_without_credentials())
    agent_values = write_values(tmp_path, "vault-s3.yaml", values)
    helm.install(RELEASE, CHART, values=[CI_VALUES, agent_values], timeout="5m")

    job_pod = run_backup_job(cluster, namespace)
    env_names = {e.name for c in job_pod.spec.containers for e in c.env or []}
    assert "AWS_SECRET_ACCESS_KEY" not in env_names, "the job got S3 credentials from its spec"
    kept = cluster.core.read_namespaced_secret(f"{RELEASE}-hermes-agent-backup-password", namespace)
    password = base64.b64decode(kept.data["RESTIC_PASSWORD"]).decode()
    with kube.port_forward(cluster, namespace, "svc/s3", 8333) as port:
        snapshots = listed_snapshots(
            port, access_key, secret_key, password, f"{namespace}.{RELEASE}"
        )
    assert [s["status"] for s in snapshots] == ["ok"], f"snapshots in the bucket: {snapshots}"
    print(f"backup job {job_pod.metadata.name} wrote snapshot {snapshots[0]['id']} to S3")

    rendered = everything_rendered_in_namespace(cluster, namespace)
    logs = container_logs(cluster, namespace, job_pod)
    manifest = helm.run("get", "all", RELEASE)
    for value in (secret_key, model_key):
        assert value not in rendered, "a Vault value is in a ConfigMap or a pod spec"
        assert value not in logs, "a Vault value is in the backup job's log"
        assert value not in manifest, "a Vault value is in the helm release"
    assert_agent_cannot_read(cluster, namespace, [access_key, secret_key])
    assert_agent_role_is_refused_the_backup_path(cluster, namespace, bao)


def assert_agent_role_is_refused_the_backup_path(
    cluster: kube.Cluster, namespace: str, bao: OpenBao
) -> None:
    """The agent pod's Vault identity (a token of its ServiceAccount for Vault's audience,
    logged in as ROLE) reads the agent's path and is refused the backup's: Vault itself,
    not the chart, keeps the S3 keys from the agent pod's Vault token."""
    request = client.AuthenticationV1TokenRequest(
        spec=client.V1TokenRequestSpec(audiences=[AUDIENCE], expiration_seconds=600)
    )
    issued = cluster.core.create_namespaced_service_account_token(
        SERVICE_ACCOUNT, namespace, request
    )
    with openbao_client(cluster, namespace, bao) as root:
        agent = hvac.Client(url=root.url)
        agent.auth.kubernetes.login(role=ROLE, jwt=issued.status.token, mount_point=AUTH_PATH)
        agent.secrets.kv.v2.read_secret_version(
            path=AGENT_PATH, mount_point=KV_MOUNT, raise_on_deleted_version=True
        )
        with pytest.raises(hvac.exceptions.Forbidden):
            agent.secrets.kv.v2.read_secret_version(
                path=BACKUP_PATH, mount_point=KV_MOUNT, raise_on_deleted_version=True
            )


def assert_agent_cannot_read(cluster: kube.Cluster, namespace: str, values: list[str]) -> None:
    """The agent container (whose shell a prompt injection may steer) holds none of the
    backup's S3 keys: not in its env file, its environment or any file it can read under
    /run, /opt/data or /tmp. Its own env file holds its model key only."""
    pod = only_pod(cluster, namespace, RELEASE).metadata.name
    patterns = "\n".join(values) + "\n"
    command = ["grep", "-rlsF", "-D", "skip", "-f", "-", "/run", "/opt/data", "/tmp"]
    found = agent_exec(cluster, namespace, pod, command, patterns)
    assert found.returncode == 1, f"the agent container can read the S3 keys: {found.stdout}"
    # The container's environment (PID 1's, which every process of it inherits).
    environ = agent_exec(
        cluster, namespace, pod, ["grep", "-caF", "-f", "-", "/proc/1/environ"], patterns
    )
    assert environ.stdout.strip() == "0", "the S3 keys are in the agent container's environment"
    names = agent_exec(
        cluster, namespace, pod, ["sed", "-n", "s/=.*//p", "/run/hermes/secrets/env"]
    )
    assert names.stdout.split() == ["LLM_API_KEY"], names.stdout


def rotate_in_openbao(
    cluster: kube.Cluster, namespace: str, bao: OpenBao, fields: dict[str, str]
) -> None:
    with openbao_client(cluster, namespace, bao) as root:
        root.secrets.kv.v2.create_or_update_secret(AGENT_PATH, secret=fields, mount_point=KV_MOUNT)


# Runs in the agent container: one chat to the local API server, then asks the fake LLM
# (cluster DNS) whether the latest request it got carried the expected key. Keys arrive on
# stdin and only a yes/no leaves, so no value lands in an argument or the test's output.
ROTATION_PROBE = """
import json, sys, urllib.request
spec = json.load(sys.stdin)
body = {"model": "fake-model", "messages": [{"role": "user", "content": spec["text"]}]}
request = urllib.request.Request(
    spec["url"],
    data=json.dumps(body).encode(),
    headers={"Authorization": "Bearer " + spec["key"], "Content-Type": "application/json"},
)
try:
    urllib.request.urlopen(request, timeout=60).read()
except OSError as exc:  # the gateway is restarting: refused, reset or 5xx
    print(json.dumps({"match": False, "chat": type(exc).__name__}))
    sys.exit(0)
with urllib.request.urlopen("http://fake-llm:8080/_auth", timeout=30) as response:
    seen = json.load(response)["authorization"]
print(json.dumps({"match": seen[-1:] == [spec["expect"]]}))
"""


def chat_until_the_llm_sees(
    cluster: kube.Cluster, namespace: str, pod: str, api_key: str, authorization: str
) -> int:
    """Chat every two seconds until the latest request the fake LLM received carried
    `authorization`; returns the tries it took.

    From inside the agent container, not through a port-forward: kubectl's
    forward dies when the gateway briefly refuses connections while it restarts.
    """
    tries = 0

    def arrived() -> bool:
        nonlocal tries
        tries += 1
        spec = {
            "url": f"http://127.0.0.1:{API_PORT}/v1/chat/completions",
            "text": f"rotation check {tries}",
            "key": api_key,
            "expect": authorization,
        }
        # A probe chat: one more is harmless, so a cut exec stream is run again (seen in CI).
        probe = agent_exec(
            cluster,
            namespace,
            pod,
            ["python3", "-c", ROTATION_PROBE],
            json.dumps(spec),
            repeatable=True,
        )
        assert probe.returncode == 0, f"rotation probe failed: {probe.stderr[-2000:]}"
        return bool(json.loads(probe.stdout.strip().splitlines()[-1])["match"])

    kube.wait_until(arrived, 240, "the rotated model key to reach the fake LLM", interval=2)
    return tries


def agent_metric(cluster: kube.Cluster, namespace: str, pod: str, prefix: str) -> str:
    """Lines of the agent's own /metrics (port 9090) that start with `prefix`."""
    url = "http://127.0.0.1:9090/metrics"
    script = f"import urllib.request; print(urllib.request.urlopen({url!r}).read().decode())"
    out = agent_exec(cluster, namespace, pod, ["python3", "-c", script])
    assert out.returncode == 0, out.stderr
    return "\n".join(line for line in out.stdout.splitlines() if line.startswith(prefix))


@pytest.mark.timeout(900)
def test_refresher_brings_a_key_rotated_in_openbao_over_tls_to_the_running_agent(
    cluster: kube.Cluster,
    namespace: str,
    helm: kube.Helm,
    tmp_path: Path,
    openbao_token_reviewer: str,
) -> None:
    images.require(IMAGES)
    bao = install_openbao(cluster, namespace, helm, tmp_path, tls=True)
    helm.install("backends", BACKENDS_CHART, timeout="3m")
    old_key = "sk-old-" + secrets.token_hex(16)
    new_key = "sk-new-" + secrets.token_hex(16)
    api_key = "api-vault-" + secrets.token_hex(16)
    set_up_openbao(
        cluster, namespace, bao, {AGENT_PATH: {"LLM_API_KEY": old_key, "API_SERVER_KEY": api_key}}
    )
    # HTTPS verified against the dev CA, which the chart mounts from vault.caSecret.
    keys = {AGENT_PATH: ["LLM_API_KEY", "API_SERVER_KEY"]}
    values = vault_values(ROLE, keys, address=bao.address, ca_secret=VAULT_CA_SECRET)
    values["vault"]["refresher"] = {"enabled": True, "interval": 5}
    helm.install(RELEASE, CHART, values=[CI_VALUES, write_values(tmp_path, "r.yaml", values)])
    pod = only_pod(cluster, namespace, RELEASE)
    chat_until_the_llm_sees(cluster, namespace, pod.metadata.name, api_key, f"Bearer {old_key}")

    rotate_in_openbao(cluster, namespace, bao, {"LLM_API_KEY": new_key, "API_SERVER_KEY": api_key})
    tries = chat_until_the_llm_sees(
        cluster, namespace, pod.metadata.name, api_key, f"Bearer {new_key}"
    )
    print(f"the rotated key reached the LLM after {tries} chat attempts")

    after = only_pod(cluster, namespace, RELEASE)
    assert after.metadata.name == pod.metadata.name, "the pod was replaced, not the gateway"
    (agent,) = [s for s in after.status.container_statuses if s.name == "agent"]
    assert agent.restart_count == 0, "the agent container restarted instead of the gateway"
    restarts = agent_metric(
        cluster, namespace, pod.metadata.name, "hermes_runtime_gateway_restarts_total"
    )
    assert 'reason="secrets-changed"' in restarts, f"gateway restarts: {restarts}"
    logs = container_logs(cluster, namespace, after)
    for value in (old_key, new_key, api_key):
        assert value not in logs, "a Vault value is in a container log"
