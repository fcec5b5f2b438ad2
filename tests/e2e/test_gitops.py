"""GitOps as Argo CD does it: `helm template`, then `kubectl apply`, and again on every sync.

Argo CD renders the chart offline (Helm's `lookup` sees nothing) and applies the result; it
runs the chart's hooks as its own (a PreSync Job, deleted and made again on each sync). Before
issue 29 every render invented a new restic password and API key, so each sync replaced both:
every later backup failed (wrong password) and every client was locked out. Here:

1. two renders of the same values are byte-identical (so a sync is a no-op, never "out of
   sync" forever);
2. the first apply brings the release up: the secrets Job creates the API key and the restic
   password in the cluster, a client chats with that key, a backup job writes a snapshot;
3. a second sync (the hook Job deleted and applied again, every other object re-applied):
   the Secrets are unchanged, the first key still authenticates, the next backup lands in the
   same repository (two snapshots, the same password), and a restore of the latest snapshot
   (`backup verify`: restore and check) passes.
"""

from __future__ import annotations

import base64
import json
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest

from . import images, kube
from .test_scenario_backup import (
    BACKENDS_CHART,
    S3_CHART,
    S3Access,
    backup_cli,
    s3_access,
    s3_values,
)

CHART = kube.REPO_ROOT / "charts" / "hermes-agent"
CI_VALUES = images.ci_values()
IMAGES = ["agent", "fake-llm", "git-server", "seaweedfs"]
RELEASE = "gitops"
FULLNAME = f"{RELEASE}-hermes-agent"
AGENT_SELECTOR = f"app.kubernetes.io/instance={RELEASE},app.kubernetes.io/component=agent"


def render(helm: kube.Helm, values: list[Path]) -> str:
    """What Argo CD renders: `helm template` with the release's name and namespace, no cluster
    (no `lookup`), and without the `helm test` hook (Argo CD does not run it)."""
    args = ["template", RELEASE, str(CHART), "--skip-tests"]
    for path in values:
        args += ["--values", str(path)]
    return helm.run(*args)


def apply(cluster: kube.Cluster, namespace: str, manifest: str, tmp_path: Path) -> None:
    path = tmp_path / f"render-{uuid.uuid4().hex[:6]}.yaml"
    path.write_text(manifest)
    kube.kubectl(cluster, namespace, "apply", "-f", str(path))


def secret_data(cluster: kube.Cluster, namespace: str, name: str) -> dict[str, str]:
    return dict(cluster.core.read_namespaced_secret(name, namespace).data)


def wait_for_agent(cluster: kube.Cluster, namespace: str) -> None:
    def ready() -> bool:
        pods = cluster.core.list_namespaced_pod(namespace, label_selector=AGENT_SELECTOR).items
        return any(
            c.type == "Ready" and c.status == "True"
            for p in pods
            if p.metadata.deletion_timestamp is None
            for c in p.status.conditions or []
        )

    kube.wait_until(ready, 600, "the agent pod Ready after `kubectl apply`")


def chat_status(cluster: kube.Cluster, namespace: str, key: str) -> int:
    body = {"model": "fake-model", "messages": [{"role": "user", "content": "hello gitops"}]}
    with kube.port_forward(cluster, namespace, f"svc/{FULLNAME}", 8642) as port:
        response = kube.with_transport_retries(
            "chat",
            lambda: httpx.post(
                f"http://127.0.0.1:{port}/v1/chat/completions",
                json=body,
                headers={"Authorization": f"Bearer {key}"},
                timeout=120,
            ),
        )
    return response.status_code


def snapshots(s3: S3Access) -> list[str]:
    """The ids of the scheduled backups' snapshots. `kubectl apply` of a render also applies
    the pre-upgrade hook Job as a plain Job (Argo CD runs it as a PreSync hook on each sync):
    its snapshot, labelled `pre-upgrade`, is left out (counted in ``pre_upgrade_snapshots``)."""
    return [s["id"] for s in listed_snapshots(s3) if "pre-upgrade" not in s["labels"]]


def pre_upgrade_snapshots(s3: S3Access) -> list[str]:
    return [s["id"] for s in listed_snapshots(s3) if "pre-upgrade" in s["labels"]]


def listed_snapshots(s3: S3Access) -> list[dict[str, Any]]:
    listed = backup_cli(s3, "list", "--json")
    assert listed.returncode == 0, listed.stderr
    return list(json.loads(listed.stdout))


def wait_job_gone_or_done(cluster: kube.Cluster, namespace: str, name: str) -> None:
    """The secrets Job applied by kubectl (a plain Job there): wait until it succeeded."""

    def succeeded() -> bool:
        job = kube.kubectl(cluster, namespace, "get", "job", name, "-o", "jsonpath={.status}")
        return '"succeeded":1' in job

    kube.wait_until(succeeded, 300, f"job {name} to succeed")


@pytest.mark.timeout(1500)
def test_two_syncs_keep_the_key_and_the_repository_password(
    cluster: kube.Cluster, namespace: str, helm: kube.Helm, tmp_path: Path
) -> None:
    images.require(IMAGES)
    helm.install("backends", BACKENDS_CHART, timeout="3m")
    helm.install("s3", S3_CHART, timeout="3m")
    generated = tmp_path / "generated-key.json"
    generated.write_text(json.dumps({"apiServer": {"key": ""}}))  # ci.yaml gives one
    values = [CI_VALUES, s3_values(tmp_path), generated]

    # 1. Deterministic: the same values, the same bytes.
    first, second = render(helm, values), render(helm, values)
    assert first == second, "two renders of the same values differ"
    assert "\nkind: Secret\n" not in first  # no generated value in any render

    # 2. The first sync.
    apply(cluster, namespace, first, tmp_path)
    wait_job_gone_or_done(cluster, namespace, f"{FULLNAME}-secrets")
    wait_for_agent(cluster, namespace)
    api = secret_data(cluster, namespace, f"{FULLNAME}-api")
    password = secret_data(cluster, namespace, f"{FULLNAME}-backup-password")
    key = base64.b64decode(api["api-key"]).decode()
    assert len(key) >= 40
    assert chat_status(cluster, namespace, key) == 200
    kube.run_job_from_cronjob(cluster, namespace, f"{FULLNAME}-backup")

    # 3. The next sync: Argo CD deletes the hook Job and makes it again, applies the rest.
    kube.kubectl(cluster, namespace, "delete", "job", f"{FULLNAME}-secrets", "--ignore-not-found")
    apply(cluster, namespace, render(helm, values), tmp_path)
    wait_job_gone_or_done(cluster, namespace, f"{FULLNAME}-secrets")
    logs = kube.kubectl(cluster, namespace, "logs", f"job/{FULLNAME}-secrets")
    assert f"kept {FULLNAME}-api/api-key" in logs, logs
    assert f"kept {FULLNAME}-backup-password/RESTIC_PASSWORD" in logs, logs
    assert secret_data(cluster, namespace, f"{FULLNAME}-api") == api
    assert secret_data(cluster, namespace, f"{FULLNAME}-backup-password") == password
    time.sleep(2)  # let a rollout, if the apply had started one, show itself
    wait_for_agent(cluster, namespace)
    assert chat_status(cluster, namespace, key) == 200  # clients keep the first key
    assert chat_status(cluster, namespace, "not-the-key-" + "x" * 30) == 401
    kube.run_job_from_cronjob(cluster, namespace, f"{FULLNAME}-backup")

    restic_password = base64.b64decode(password["RESTIC_PASSWORD"]).decode()
    with kube.port_forward(cluster, namespace, "svc/s3", 8333) as s3_port:
        s3 = s3_access(cluster, namespace, s3_port, restic_password, RELEASE)
        ids = snapshots(s3)
        assert len(ids) == 2, ids  # both backups in the one repository, one password
        # The pre-upgrade Job of the first apply (the second applies the same Job: unchanged).
        assert len(pre_upgrade_snapshots(s3)) == 1, listed_snapshots(s3)
        verified = backup_cli(s3, "verify", "--snapshot", "latest", "--json")
        assert verified.returncode == 0, verified.stderr
