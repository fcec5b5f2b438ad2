"""Continuous replication's kill test: a pod dies with its volume, a new release restores.

A release with ``backup.continuous.enabled`` replicates its databases to SeaweedFS (S3) in the
namespace through the Litestream sidecar. A writer in the agent container commits every 100 ms
into ``/opt/data/rpo.db`` and prints each committed id. Then the writer and every process of
the replication sidecar are frozen at once (SIGSTOP: they never run again, like a node that
died), the release is uninstalled and its data PVC deleted. No restic snapshot exists: the
backup CronJob never ran. A new release with ``restore.fromSnapshot: latest`` (and the first
release's restic password Secret, which outlives it) restores ``rpo.db`` from its replica: the
database is intact, consistent, and the commits lost are counted and printed (the RPO goal,
<= 2 s of commits, is a benchmark figure: bench/backup_rpo.py).
"""

from __future__ import annotations

import json
import subprocess
import threading
from pathlib import Path

import pytest
from ruamel.yaml import YAML

from . import images, kube
from .test_scenario_backup import (
    BACKENDS_CHART,
    CHART,
    CI_VALUES,
    S3_CHART,
    agent_pod,
    release_secret,
    s3_values,
)

IMAGES = ["agent", "fake-llm", "git-server", "seaweedfs"]
SOURCE = "hermes"
RESTORED = "restored"
COMMITS_BEFORE_KILL = 200
WRITER = """
import os, sys, time
from hermes_runtime.common.sqlite import connect
conn = connect("/opt/data/rpo.db")
conn.execute("CREATE TABLE IF NOT EXISTS commits(id INTEGER PRIMARY KEY, ts REAL)")
print("pid", os.getpid(), flush=True)
while True:
    with conn:
        conn.execute("INSERT INTO commits(ts) VALUES (?)", (time.time(),))
    print(conn.last_insert_rowid(), flush=True)
    time.sleep(0.1)
"""
CHECK = """
import json, apsw
db = apsw.Connection("/opt/data/rpo.db", flags=apsw.SQLITE_OPEN_READONLY)
ok = db.execute("PRAGMA integrity_check").fetchall()
count, top = db.execute("SELECT count(*), max(id) FROM commits").fetchall()[0]
print(json.dumps({"integrity": ok[0][0], "count": count, "max_id": top}))
"""


def values(
    tmp_path: Path, restore: str = "", password_secret: str = "", from_agent: str = ""
) -> Path:
    """The backup scenario's S3 values (cronjob mode, no plugins) with continuous replication."""
    path = s3_values(tmp_path, restore, password_secret, from_agent)
    yaml = YAML()
    overrides = yaml.load(path.read_text())
    overrides["backup"]["continuous"] = {"enabled": True}
    if restore:  # replicas are read only when asked for (never picked from the bucket alone)
        overrides["restore"]["fromReplicas"] = True
    with path.open("w") as handle:
        yaml.dump(overrides, handle)
    return path


class Writer:
    """The writer's ``kubectl exec`` stream: its pid, then each committed id."""

    def __init__(self, cluster: kube.Cluster, namespace: str, pod: str) -> None:
        cmd = [kube.tool("kubectl"), "--kubeconfig", str(cluster.kubeconfig), "-n", namespace]
        cmd += ["exec", "-i", pod, "-c", "agent", "--", "python", "-c", WRITER]
        self.process = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
        self.pid = ""
        self.last = 0
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            if line.startswith("pid "):
                self.pid = line.split()[1]
            elif line.strip().isdigit():
                self.last = int(line)


def freeze(cluster: kube.Cluster, namespace: str, pod: str, writer: Writer) -> int:
    """SIGSTOP the writer and the whole replication sidecar at once; the last committed id."""
    base = [kube.tool("kubectl"), "--kubeconfig", str(cluster.kubeconfig), "-n", namespace]
    stops = [
        subprocess.Popen(
            [*base, "exec", pod, "-c", "agent", "--", "sh", "-c", f"kill -STOP {writer.pid}"]
        ),
        subprocess.Popen(
            [*base, "exec", pod, "-c", "replicate", "--", "sh", "-c", "kill -STOP -1"]
        ),
    ]
    for stop in stops:
        assert stop.wait(60) == 0, "could not freeze the writer or the replicator"
    committed = writer.last
    writer.process.kill()
    return committed


@pytest.mark.timeout(1500)
def test_pod_and_volume_lost_then_a_new_release_restores_the_replica(
    cluster: kube.Cluster, namespace: str, helm: kube.Helm, tmp_path: Path
) -> None:
    images.require(IMAGES)
    helm.install("backends", BACKENDS_CHART, timeout="3m")
    helm.install("s3", S3_CHART, timeout="3m")
    helm.install(SOURCE, CHART, values=[CI_VALUES, values(tmp_path)], timeout="5m")
    pod = agent_pod(cluster, namespace, SOURCE)

    writer = Writer(cluster, namespace, pod)
    kube.wait_until(
        lambda: writer.last >= COMMITS_BEFORE_KILL,
        timeout=300,
        what=f"{COMMITS_BEFORE_KILL} commits of the writer",
    )
    committed = freeze(cluster, namespace, pod, writer)

    password = release_secret(cluster, namespace, SOURCE, "RESTIC_PASSWORD").metadata.name
    helm.uninstall(SOURCE)
    claims = cluster.core.list_namespaced_persistent_volume_claim(
        namespace, label_selector=f"app.kubernetes.io/instance={SOURCE}"
    ).items
    for claim in claims:
        if claim.metadata.name.endswith("-data"):
            kube.kubectl(cluster, namespace, "delete", "pvc", claim.metadata.name, "--wait")

    restore_values = values(
        tmp_path, restore="latest", password_secret=password, from_agent=f"{namespace}.{SOURCE}"
    )
    helm.install(RESTORED, CHART, values=[CI_VALUES, restore_values], timeout="5m")
    restored_pod = agent_pod(cluster, namespace, RESTORED)
    log = kube.kubectl(cluster, namespace, "logs", restored_pod, "-c", "restore")
    events = [json.loads(line) for line in log.splitlines() if line.startswith("{")]
    chosen = {e["path"]: e["source"] for e in events if e["event"] == "backup.restore.database"}
    assert chosen.get("rpo.db") == "litestream", log  # the restore says which copy it used
    found = json.loads(
        kube.read_in_container(cluster, namespace, restored_pod, "agent", ["python", "-c", CHECK])
    )
    assert found["integrity"] == "ok"
    assert found["count"] == found["max_id"]  # no commit missing in the middle
    lost = committed - int(found["count"])
    print(f"RPO in the cluster: {lost} of {committed} commits lost ({lost * 0.1:.1f} s at 100 ms)")
    assert 0 <= lost < committed - 100  # replication kept up after the first commits
