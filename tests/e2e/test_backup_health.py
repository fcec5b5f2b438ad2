"""Backup health end to end: scratch space that scales, and the outcome in the agent's /metrics.

One release (values-examples/ci.yaml: cronjob mode, the backup PVC as target) whose pods get a
/tmp capped at 16Mi (`agent.tmpSizeLimit`), with a 48 MiB database of incompressible rows on
the data volume:

- a Job from the chart's backup CronJob succeeds: it stages the snapshot in /scratch, the
  generic ephemeral volume (`backup.scratch.*`) that kind's local-path provisioner creates
  for the Job's pod, sized like the data volume, and not in /tmp;
- the agent's /metrics then shows that run: last success and last attempt inside the Job's
  run, its duration, the bytes it added (as its log says), the databases it saw, no failure;
- a Job from the same template with a wrong repository password fails, and /metrics shows it:
  the failure counter and last run status move, the last success stays.

Why not watch /tmp overflow evict the Job: the kubelet measures emptyDir usage from a volume
stats cache refreshed once a minute, so a backup that finishes in seconds is never evicted
whatever it writes to /tmp. The log line naming the staging folder, checked against the
pod's mounts, is what tells /scratch from /tmp here.
"""

from __future__ import annotations

import base64
import contextlib
import copy
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from kubernetes import client
from prometheus_client.parser import text_string_to_metric_families
from ruamel.yaml import YAML

from . import images, kube

CHART = kube.REPO_ROOT / "charts" / "hermes-agent"
BACKENDS_CHART = Path(__file__).parent / "charts" / "ci-backends"
RELEASE = "hermes"
FULLNAME = f"{RELEASE}-hermes-agent"
AGENT = f"app.kubernetes.io/instance={RELEASE},app.kubernetes.io/component=agent"
TMP_LIMIT_MIB = 16
DATABASE_MIB = 48
METRICS_PORT = 9090
WRONG_SECRET = "wrong-restic-password"
STATUS_FILE = "/opt/data/.hermes-runtime/backup-status.json"
# 48 rows of 1 MiB of random bytes: bigger than /tmp's limit, and restic cannot compress it.
MAKE_DATABASE = f"""
import os, apsw
db = apsw.Connection("/opt/data/big.db")
db.execute("CREATE TABLE blobs(id INTEGER PRIMARY KEY, body BLOB)")
with db:
    for _ in range({DATABASE_MIB}):
        db.execute("INSERT INTO blobs(body) VALUES (?)", (os.urandom(1 << 20),))
db.close()
print(os.path.getsize("/opt/data/big.db"))
"""


def release_values(tmp_path: Path) -> Path:
    values = {
        "agent": {"tmpSizeLimit": f"{TMP_LIMIT_MIB}Mi"},
        "tests": {"enabled": False},
        **images.agent_values(),
    }
    path = tmp_path / "health-values.yaml"
    with path.open("w") as handle:
        YAML().dump(values, handle)
    return path


def agent_pod(cluster: kube.Cluster, namespace: str) -> str:
    pods = cluster.core.list_namespaced_pod(namespace, label_selector=AGENT).items
    live = [p.metadata.name for p in pods if p.metadata.deletion_timestamp is None]
    assert len(live) == 1, f"expected one agent pod: {live}"
    return str(live[0])


def agent_exec(
    cluster: kube.Cluster, namespace: str, command: list[str], *, repeatable: bool = False
) -> str:
    pod = agent_pod(cluster, namespace)
    done = kube.exec_in_container(cluster, namespace, pod, "agent", command, repeatable=repeatable)
    assert done.returncode == 0, f"{command[:2]} in {pod}: {done.stderr}"
    return done.stdout


@dataclass(frozen=True)
class JobRun:
    """A finished backup Job: its window (API server times, whole seconds) and its pod."""

    name: str
    started: float
    finished: float
    pod: client.V1Pod
    log: str

    def events(self, name: str) -> list[dict[str, Any]]:
        """The Job's JSON log lines (`backup create` logs one object per line) of event ``name``."""
        found = []
        for line in self.log.splitlines():
            with contextlib.suppress(ValueError):
                record = json.loads(line)
                if isinstance(record, dict) and record.get("event") == name:
                    found.append(record)
        return found


def backup_job(cluster: kube.Cluster, namespace: str, name: str) -> client.V1Job:
    """A Job from the chart's backup CronJob template (what `kubectl create job --from`
    makes), not retried, so a failure shows at once."""
    batch = client.BatchV1Api(cluster.api)
    cronjob = batch.read_namespaced_cron_job(f"{FULLNAME}-backup", namespace)
    spec = copy.deepcopy(cronjob.spec.job_template.spec)
    spec.backoff_limit = 0
    return client.V1Job(metadata=client.V1ObjectMeta(name=name), spec=spec)


def run_job(cluster: kube.Cluster, namespace: str, job: client.V1Job, succeed: bool) -> JobRun:
    batch = client.BatchV1Api(cluster.api)
    name = job.metadata.name
    batch.create_namespaced_job(namespace, job)

    def done() -> bool:
        status = batch.read_namespaced_job_status(name, namespace).status
        return bool(status.succeeded or status.failed)

    kube.wait_until(done, 300, f"job {name} to finish")
    status = batch.read_namespaced_job_status(name, namespace).status
    (pod,) = cluster.core.list_namespaced_pod(namespace, label_selector=f"job-name={name}").items
    log = kube.pod_log(cluster, namespace, pod.metadata.name)
    assert bool(status.succeeded) == succeed, f"job {name}: {status.conditions}\n{log}"
    finished = status.completion_time or max(c.last_transition_time for c in status.conditions)
    return JobRun(name, status.start_time.timestamp(), finished.timestamp(), pod, log)


def scrape(cluster: kube.Cluster, namespace: str) -> dict[str, float]:
    """The agent's /metrics (through a port-forward to its pod), sample name -> value."""
    pod = f"pod/{agent_pod(cluster, namespace)}"
    with kube.port_forward(cluster, namespace, pod, METRICS_PORT) as port:
        url = f"http://127.0.0.1:{port}/metrics"
        answer = kube.with_transport_retries("metrics", lambda: httpx.get(url, timeout=30))
    assert answer.status_code == 200, answer.text
    return {
        sample.name: sample.value
        for family in text_string_to_metric_families(answer.text)
        for sample in family.samples
        if sample.name.startswith("hermes_backup_")
    }


def within(value: float, run: JobRun) -> bool:
    """Inside the Job's run; its API times are whole seconds, hence one second of slack."""
    return run.started - 1 <= value <= run.finished + 1


def check_staged_on_scratch(cluster: kube.Cluster, namespace: str, run: JobRun) -> None:
    """The snapshot was staged on the pod's generic ephemeral volume, which fits the database."""
    (started,) = run.events("backup.create.started")
    container = run.pod.spec.containers[0]
    mounts = {m.mount_path: m.name for m in container.volume_mounts}
    scratch = Path(started["scratch"])
    assert mounts.get(str(scratch.parent)) == "backup-scratch", (
        f"staged in {scratch}, not on the scratch volume (mounts: {mounts})"
    )
    assert mounts.get("/tmp") == "tmp-backup"  # the backup container's own
    volumes = {v.name: v for v in run.pod.spec.volumes}
    assert volumes["tmp-backup"].empty_dir.size_limit == f"{TMP_LIMIT_MIB}Mi"
    claim = cluster.core.read_namespaced_persistent_volume_claim(
        f"{run.pod.metadata.name}-backup-scratch", namespace
    )
    assert claim.status.phase == "Bound", claim.status
    assert claim.status.capacity["storage"] == "1Gi"  # persistence.size of ci.yaml
    assert claim.metadata.owner_references[0].name == run.pod.metadata.name


def check_success_metrics(metrics: dict[str, float], run: JobRun) -> None:
    (finished,) = run.events("backup.create.finished")
    databases = {e["path"] for e in run.events("backup.create.database")}
    assert "big.db" in databases, databases
    success = metrics["hermes_backup_last_success_timestamp_seconds"]
    assert within(success, run), (success, run)
    assert metrics["hermes_backup_last_attempt_timestamp_seconds"] == success
    assert metrics["hermes_backup_last_run_success"] == 1
    assert 0 < metrics["hermes_backup_last_duration_seconds"] <= run.finished - run.started + 1
    assert metrics["hermes_backup_last_bytes_added"] == finished["bytes_uploaded"]
    assert finished["bytes_uploaded"] >= DATABASE_MIB << 20, "random rows do not compress"
    assert metrics["hermes_backup_last_databases"] == len(databases)
    assert metrics["hermes_backup_failures_total"] == 0


def check_failure_metrics(
    metrics: dict[str, float], before: dict[str, float], run: JobRun, error: str
) -> None:
    assert metrics["hermes_backup_last_run_success"] == 0
    assert metrics["hermes_backup_failures_total"] == 1
    attempt = metrics["hermes_backup_last_attempt_timestamp_seconds"]
    assert within(attempt, run), (attempt, run)
    assert attempt > before["hermes_backup_last_success_timestamp_seconds"]
    for kept in (
        "hermes_backup_last_success_timestamp_seconds",
        "hermes_backup_last_bytes_added",
        "hermes_backup_last_databases",
    ):
        assert metrics[kept] == before[kept], f"{kept} changed by a failed run"
    assert "wrong password" in error, error


@pytest.mark.timeout(900)
def test_backup_of_a_database_over_the_tmp_limit_and_its_outcome_in_metrics(
    cluster: kube.Cluster, namespace: str, helm: kube.Helm, tmp_path: Path
) -> None:
    images.require(["agent", "fake-llm", "git-server"])
    backends = {
        "fakeLlm.image": images.ref("fake-llm"),
        "gitServer.image": images.ref("git-server"),
    }
    helm.install("backends", BACKENDS_CHART, set_values=backends, timeout="3m")
    helm.install(RELEASE, CHART, values=[images.ci_values(), release_values(tmp_path)])
    size = int(agent_exec(cluster, namespace, ["python", "-c", MAKE_DATABASE]))
    assert size > DATABASE_MIB << 20 > TMP_LIMIT_MIB << 20
    assert not any(k.startswith("hermes_backup_last") for k in scrape(cluster, namespace))

    job = backup_job(cluster, namespace, kube.unique_name("backup-now"))
    run = run_job(cluster, namespace, job, succeed=True)
    check_staged_on_scratch(cluster, namespace, run)
    metrics = scrape(cluster, namespace)
    check_success_metrics(metrics, run)

    password = base64.b64encode(b"not-the-repository-password").decode()
    cluster.core.create_namespaced_secret(
        namespace,
        client.V1Secret(
            metadata=client.V1ObjectMeta(name=WRONG_SECRET), data={"RESTIC_PASSWORD": password}
        ),
    )
    wrong = backup_job(cluster, namespace, kube.unique_name("backup-wrong"))
    for env in wrong.spec.template.spec.containers[0].env:
        if env.name == "RESTIC_PASSWORD":
            env.value_from.secret_key_ref.name = WRONG_SECRET
    failed = run_job(cluster, namespace, wrong, succeed=False)
    status = json.loads(agent_exec(cluster, namespace, ["cat", STATUS_FILE], repeatable=True))
    check_failure_metrics(scrape(cluster, namespace), metrics, failed, status["error"])
    assert status["snapshot"] == run.events("backup.create.finished")[0]["snapshot"]
