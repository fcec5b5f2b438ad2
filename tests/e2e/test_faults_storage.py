"""Storage faults beyond restarts (issue 30): the bucket down for a backup Job and for
continuous replication, and a stalled volume provisioner.

SeaweedFS keeps its data on a PVC here (tests/e2e/storage_testlib.py), so "bucket down" is
SeaweedFS scaled to 0 and "back" the same bucket with everything it held.

- A backup Job started while the bucket is down fails, its log naming the endpoint; the
  agent's /metrics says failed; no snapshot is added; once the bucket is back the next Job
  succeeds into the same repository and `backup verify` reads every byte of it.
- The bucket goes down while a Job uploads (a ballast file makes the upload last) and comes
  back 60 s later: the Job either finishes (restic retried) or fails naming the endpoint,
  and either way `backup list` shows only complete snapshots, the next Job succeeds and
  `backup verify` passes. Which of the two happened is printed, with the Job's duration.
- Continuous replication (Litestream) while the bucket is down for 60 s: a writer commits
  every 100 ms throughout; once the bucket is back the replica catches up (polled by a
  restore from the replicas in a pod), and a new release restoring the latest with
  `restore.fromReplicas` holds every row, those written during the outage included.
- A provisioner that stops working (SIGSTOP) while a PVC waits on it: the e2e harness'
  watchdog (kube.ProvisionerWatchdog) deletes its pod, the new pod provisions the volume.
  A provisioner of the test's own (local-path, under a provisioner name of its own) is
  stalled, never the cluster's.

The backup CLI runs in a pod of the agent image (S3 keys from the SeaweedFS Secret, the
password from the release's Secret), like the backup Job.
"""

from __future__ import annotations

import contextlib
import copy
import json
import time
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from . import images, kube
from . import storage_testlib as storage
from .test_backup_continuous import Writer
from .test_backup_continuous import values as continuous_values
from .test_backup_health import JobRun, run_job, scrape
from .test_scenario_backup import CHART, CI_VALUES, agent_pod, release_secret, s3_values

IMAGES = ["agent", "fake-llm", "git-server", "seaweedfs", "busybox"]
SOURCE = "hermes"
RESTORED = "restored"
FULLNAME = f"{SOURCE}-hermes-agent"
S3_ENDPOINT = "http://s3:8333"
TARGET = "s3://backups/hermes"
OUTAGE_SECONDS = 60
BALLAST_MIB = 768
BALLAST = f"head -c {BALLAST_MIB << 20} /dev/urandom > /opt/data/fault-ballast.bin"
# In the backup container: wait until restic (a child of `backup create`) has the ballast
# open, i.e. the upload is under way; prints the moment.
UPLOADING = """
import os, sys, time
deadline = time.monotonic() + 240
while time.monotonic() < deadline:
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
            if any(os.readlink(f"/proc/{pid}/fd/{fd}").endswith("fault-ballast.bin") for fd in fds):
                with open(f"/proc/{pid}/cmdline", "rb") as handle:
                    if b"restic" in handle.read():
                        print(time.time())
                        sys.exit(0)
        except OSError:
            continue
    time.sleep(0.05)
sys.exit("restic never opened the ballast")
"""


def backup_job(cluster: kube.Cluster, namespace: str, prefix: str) -> client.V1Job:
    """A Job from the release's backup CronJob template, not retried (one pod, one outcome)."""
    batch = client.BatchV1Api(cluster.api)
    cronjob = batch.read_namespaced_cron_job(f"{FULLNAME}-backup", namespace)
    spec = copy.deepcopy(cronjob.spec.job_template.spec)
    spec.backoff_limit = 0
    name = kube.unique_name(prefix)
    return client.V1Job(metadata=client.V1ObjectMeta(name=name), spec=spec)


def cli_pod(cluster: kube.Cluster, namespace: str, args: list[str]) -> kube.PodResult:
    """`hermes-runtime backup <args> --target TARGET --s3-endpoint ... --json` in a pod."""
    command = ["hermes-runtime", "backup", *args, "--target", TARGET]
    command += ["--s3-endpoint", S3_ENDPOINT, "--json"]
    pod = bucket_pod(cluster, namespace, "backup-cli", command, user=10000)
    pod.spec.containers[0].env.append(
        client.V1EnvVar(name="RESTIC_CACHE_DIR", value="/tmp/restic-cache")
    )
    return kube.run_pod(cluster, namespace, pod, timeout=600)


def bucket_pod(
    cluster: kube.Cluster, namespace: str, prefix: str, command: list[str], user: int = 65534
) -> client.V1Pod:
    """A pod of the agent image running ``command`` with the bucket's S3 keys and the release's
    restic password (as the backup Job has them) and a writable /tmp."""
    pod = kube.restricted_pod(kube.unique_name(prefix), images.ref("agent"), command, user)
    password = release_secret(cluster, namespace, SOURCE, "RESTIC_PASSWORD").metadata.name
    container = pod.spec.containers[0]
    container.env_from = [
        client.V1EnvFromSource(secret_ref=client.V1SecretEnvSource(name="s3-credentials"))
    ]
    container.env = [
        client.V1EnvVar(
            name="RESTIC_PASSWORD",
            value_from=client.V1EnvVarSource(
                secret_key_ref=client.V1SecretKeySelector(name=password, key="RESTIC_PASSWORD")
            ),
        ),
        client.V1EnvVar(name="HOME", value="/tmp"),
        client.V1EnvVar(name="HERMES_RUNTIME_AGENT", value=f"{namespace}.{SOURCE}"),
        client.V1EnvVar(name="AWS_REGION", value="us-east-1"),
    ]
    container.volume_mounts = [client.V1VolumeMount(name="tmp", mount_path="/tmp")]
    pod.spec.volumes = [client.V1Volume(name="tmp", empty_dir=client.V1EmptyDirVolumeSource())]
    return pod


def printed_json(logs: str) -> Any:
    """The JSON document a `--json` command printed last (the pod's log also holds its
    one-line log events): the first line from which the rest of the log parses as one."""
    lines = logs.strip().splitlines()
    for index, line in enumerate(lines):
        if line[:1] in "[{":
            with contextlib.suppress(ValueError):
                return json.loads("\n".join(lines[index:]))
    raise AssertionError(f"no JSON document at the end of:\n{logs[-2000:]}")


def snapshots(cluster: kube.Cluster, namespace: str) -> list[dict[str, Any]]:
    done = cli_pod(cluster, namespace, ["list"])
    assert done.phase == "Succeeded", done.logs
    return list(printed_json(done.logs))


def verify(cluster: kube.Cluster, namespace: str, snapshot: str) -> dict[str, Any]:
    done = cli_pod(cluster, namespace, ["verify", "--snapshot", snapshot])
    assert done.phase == "Succeeded", f"backup verify {snapshot} failed:\n{done.logs}"
    return dict(printed_json(done.logs))


def events(log: str) -> list[dict[str, Any]]:
    """The one-line JSON events of a backup container's log."""
    found = []
    for line in log.splitlines():
        if line.startswith("{"):
            with contextlib.suppress(ValueError):
                found.append(json.loads(line))
    return found


def finished_snapshot(run: JobRun) -> str:
    (finished,) = run.events("backup.create.finished")
    return str(finished["snapshot"])


def install_source(
    cluster: kube.Cluster, namespace: str, helm: kube.Helm, tmp_path: Path, values: Path
) -> None:
    storage.install_s3_on_a_volume(cluster, namespace, helm)
    helm.install(SOURCE, CHART, values=[CI_VALUES, values], timeout="5m")


@pytest.mark.timeout(900)
def test_a_backup_job_with_the_bucket_down_fails_naming_it_and_the_next_one_succeeds(
    cluster: kube.Cluster, namespace: str, helm: kube.Helm, tmp_path: Path
) -> None:
    images.require(IMAGES)
    began = time.monotonic()
    install_source(cluster, namespace, helm, tmp_path, s3_values(tmp_path))
    first = run_job(cluster, namespace, backup_job(cluster, namespace, "backup-first"), True)
    before = scrape(cluster, namespace)
    assert before["hermes_backup_last_run_success"] == 1

    down = time.time()
    storage.bucket_down(cluster, namespace)
    failed = run_job(cluster, namespace, backup_job(cluster, namespace, "backup-down"), False)
    detected = time.time()
    assert f"cannot reach the S3 endpoint {S3_ENDPOINT}" in failed.log, failed.log
    assert "backup.create.finished" not in failed.log
    after = scrape(cluster, namespace)
    assert after["hermes_backup_last_run_success"] == 0, after
    assert after["hermes_backup_failures_total"] == before["hermes_backup_failures_total"] + 1
    assert (
        after["hermes_backup_last_success_timestamp_seconds"]
        == (before["hermes_backup_last_success_timestamp_seconds"])
    )

    storage.bucket_up(cluster, namespace)
    up = time.time()
    again = run_job(cluster, namespace, backup_job(cluster, namespace, "backup-again"), True)
    recovered = time.time()
    listed = snapshots(cluster, namespace)
    ids = [finished_snapshot(first), finished_snapshot(again)]
    assert sorted(s["id"] for s in listed) == sorted(ids), listed
    assert all(s["status"] == "ok" for s in listed), listed
    for snapshot in ids:
        verify(cluster, namespace, snapshot)
    assert scrape(cluster, namespace)["hermes_backup_last_run_success"] == 1
    print(
        "figures: "
        + json.dumps(
            {
                "fault": "bucket down, backup Job started during the outage",
                "detect_s": round(detected - down, 1),  # the Job failed, /metrics says so
                "recover_s": round(recovered - up, 1),  # the next Job's run
                "failed_requests": 0,
                "error": failed.log.strip().splitlines()[-1][-300:],
            }
        )
    )
    print(f"total {time.monotonic() - began:.0f} s")


def job_pod_running(cluster: kube.Cluster, namespace: str, job: str) -> str:
    found: list[str] = []

    def running() -> bool:
        pods = cluster.core.list_namespaced_pod(namespace, label_selector=f"job-name={job}")
        found[:] = [p.metadata.name for p in pods.items if p.status.phase == "Running"]
        return bool(found)

    kube.wait_until(running, 240, f"backup job {job} running", interval=0.5)
    return found[0]


@pytest.mark.timeout(1200)
def test_the_bucket_down_for_a_minute_during_an_upload_leaves_the_repository_whole(
    cluster: kube.Cluster, namespace: str, helm: kube.Helm, tmp_path: Path
) -> None:
    images.require(IMAGES)
    began = time.monotonic()
    install_source(cluster, namespace, helm, tmp_path, s3_values(tmp_path))
    first = run_job(cluster, namespace, backup_job(cluster, namespace, "backup-first"), True)
    pod = agent_pod(cluster, namespace, SOURCE)
    kube.read_in_container(cluster, namespace, pod, "agent", ["sh", "-c", BALLAST])

    job = backup_job(cluster, namespace, "backup-cut")
    batch = client.BatchV1Api(cluster.api)
    outcome: dict[str, Any] = {}
    batch.create_namespaced_job(namespace, job)
    runner = job_pod_running(cluster, namespace, job.metadata.name)
    uploading = kube.read_in_container(
        cluster, namespace, runner, "backup", ["python3", "-c", UPLOADING]
    )
    storage.bucket_down(cluster, namespace)
    down = time.time()  # the server gone, the stand-in refusing
    print(f"bucket down {down - float(uploading):.1f} s into the upload")
    time.sleep(OUTAGE_SECONDS)  # the outage itself, not a wait for a result
    storage.bucket_up(cluster, namespace)
    up = time.time()

    def ended() -> bool:
        status = batch.read_namespaced_job_status(job.metadata.name, namespace).status
        outcome.update(succeeded=bool(status.succeeded), failed=bool(status.failed))
        return bool(status.succeeded or status.failed)

    kube.wait_until(ended, 900, f"job {job.metadata.name} to end")
    ended_at = time.time()
    log = kube.pod_log(cluster, namespace, runner)
    if outcome["failed"]:
        assert S3_ENDPOINT.removeprefix("http://") in log, log
    else:
        (finished,) = [e for e in events(log) if e.get("event") == "backup.create.finished"]
        assert finished["ts"] > down, "the upload ended before the bucket went down"
    print(
        f"job across the outage: {'succeeded' if outcome['succeeded'] else 'failed'}, "
        f"ended {ended_at - up:.1f} s after the bucket came back\n{log[-1500:]}"
    )

    again = run_job(cluster, namespace, backup_job(cluster, namespace, "backup-again"), True)
    listed = snapshots(cluster, namespace)
    assert all(s["status"] == "ok" for s in listed), listed
    expected = {finished_snapshot(first), finished_snapshot(again)}
    assert expected <= {s["id"] for s in listed}, listed
    assert len(listed) == len(expected) + int(outcome["succeeded"]), listed
    verify(cluster, namespace, finished_snapshot(again))
    print(
        "figures: "
        + json.dumps(
            {
                "fault": f"bucket down {OUTAGE_SECONDS} s during a Job's upload",
                "job": "succeeded" if outcome["succeeded"] else "failed",
                "job_end_after_bucket_back_s": round(ended_at - up, 1),
                "snapshots": len(listed),
            }
        )
    )
    print(f"total {time.monotonic() - began:.0f} s")


# In a pod of the agent image: restore the latest from the replicas into a fresh folder, every
# 2 s, until rpo.db holds argv[1]; prints how long that took and what it held.
CAUGHT_UP = """
import json, shutil, subprocess, sys, tempfile, time, apsw
wanted, started = int(sys.argv[1]), time.time()
while True:
    work = tempfile.mkdtemp(dir="/tmp")
    done = subprocess.run(
        ["hermes-runtime", "backup", "restore", "--target", sys.argv[2], "--s3-endpoint",
         sys.argv[3], "--snapshot", "latest", "--replicas", sys.argv[2] + "/litestream",
         "--data-dir", work + "/data"],
        capture_output=True, text=True,
    )
    top = 0
    if done.returncode == 0:
        db = apsw.Connection(work + "/data/rpo.db", flags=apsw.SQLITE_OPEN_READONLY)
        top = db.execute("SELECT max(id) FROM commits").fetchone()[0] or 0
        db.close()
    shutil.rmtree(work, ignore_errors=True)
    if top >= wanted:
        print(json.dumps({"seconds": time.time() - started, "max_id": top}))
        sys.exit(0)
    print(f"replica at {top}, waiting for {wanted}: {done.stderr[-300:]}", file=sys.stderr)
    time.sleep(2)
"""
CHECK_ROWS = """
import json, apsw
db = apsw.Connection("/opt/data/rpo.db", flags=apsw.SQLITE_OPEN_READONLY)
ok = db.execute("PRAGMA integrity_check").fetchall()[0][0]
count, top = db.execute("SELECT count(*), max(id) FROM commits").fetchall()[0]
print(json.dumps({"integrity": ok, "count": count, "max_id": top}))
"""


def replica_holds(cluster: kube.Cluster, namespace: str, wanted: int) -> dict[str, Any]:
    """Poll the replica (a restore from it in a pod) until rpo.db holds commit ``wanted``."""
    command = ["python3", "-c", CAUGHT_UP, str(wanted), TARGET, S3_ENDPOINT]
    pod = bucket_pod(cluster, namespace, "replica-poll", command)
    done = kube.run_pod(cluster, namespace, pod, timeout=300)
    assert done.phase == "Succeeded", f"the replica never held commit {wanted}:\n{done.logs}"
    return dict(json.loads(done.logs.strip().splitlines()[-1]))


@pytest.mark.timeout(1200)
def test_replication_resumes_after_a_bucket_outage_without_a_gap(
    cluster: kube.Cluster, namespace: str, helm: kube.Helm, tmp_path: Path
) -> None:
    images.require(IMAGES)
    began = time.monotonic()
    install_source(cluster, namespace, helm, tmp_path, continuous_values(tmp_path))
    pod = agent_pod(cluster, namespace, SOURCE)
    writer = Writer(cluster, namespace, pod)
    kube.wait_until(lambda: writer.last >= 50, 300, "50 commits of the writer")
    first = replica_holds(cluster, namespace, writer.last)  # replication works before
    print(f"replica caught up in {first['seconds']:.1f} s before the outage")

    storage.bucket_down(cluster, namespace)
    outage_first = writer.last + 1
    time.sleep(OUTAGE_SECONDS)  # the outage itself; the writer keeps committing
    outage_last = writer.last
    storage.bucket_up(cluster, namespace)
    up = time.time()
    assert outage_last - outage_first > 100, "the writer stalled during the outage"
    caught = replica_holds(cluster, namespace, outage_last)
    recovered = time.time()
    print(
        f"commits {outage_first}..{outage_last} written while the bucket was down; the replica "
        f"held them {recovered - up:.1f} s after it came back"
    )
    writer.process.kill()

    password = release_secret(cluster, namespace, SOURCE, "RESTIC_PASSWORD").metadata.name
    helm.uninstall(SOURCE)
    claims = cluster.core.list_namespaced_persistent_volume_claim(
        namespace, label_selector=f"app.kubernetes.io/instance={SOURCE}"
    ).items
    for claim in claims:
        if claim.metadata.name.endswith("-data"):
            kube.kubectl(cluster, namespace, "delete", "pvc", claim.metadata.name, "--wait")
    restore = continuous_values(
        tmp_path, restore="latest", password_secret=password, from_agent=f"{namespace}.{SOURCE}"
    )
    helm.install(RESTORED, CHART, values=[CI_VALUES, restore], timeout="5m")
    restored = agent_pod(cluster, namespace, RESTORED)
    found = json.loads(
        kube.read_in_container(cluster, namespace, restored, "agent", ["python", "-c", CHECK_ROWS])
    )
    assert found["integrity"] == "ok", found
    assert found["count"] == found["max_id"], f"a gap in the restored commits: {found}"
    assert found["max_id"] >= outage_last, f"commits of the outage missing: {found}"
    print(
        "figures: "
        + json.dumps(
            {
                "fault": f"bucket down {OUTAGE_SECONDS} s under continuous replication",
                "recover_s": round(recovered - up, 1),  # bucket back -> replica holds all
                "outage_commits": outage_last - outage_first + 1,
                "restored_max_id": found["max_id"],
                "caught_up": caught,
            }
        )
    )
    print(f"total {time.monotonic() - began:.0f} s")
