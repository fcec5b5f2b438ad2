"""Scenario: the agent under faults loses and duplicates nothing (issue 17).

One install, two chat clients in a pod (tests/support/chat_load.py: one keeps its history on
the server with `X-Hermes-Session-Id`, one sends it; both retry a failed turn until it is
answered), then in turn: graceful `kubectl delete pod`, forced delete, `kill -9` of the gateway
three times (the supervisor restarts it in place), `kubectl rollout restart`, and a backup Job
killed mid-run. After each fault:

- every answered (HTTP 200) turn is in LCM exactly once (a retried turn too);
- `PRAGMA integrity_check` is ok on lcm.db and state.db;
- `hermes-runtime backup list` shows only complete snapshots.

Per fault it prints the outage (/health down -> back through the Service), failed requests,
the longest connect and the slowest answered request. Those are benchmark figures, never
asserted (docs/benchmarks.md has them from a quiet machine).
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from kubernetes import client
from support.chat_load import FaultFigures, fault_figures

from . import faults_testlib as lib
from . import images, kube
from .test_scenario_conversation import (
    AGENT_SELECTOR,
    CHART,
    CI_VALUES,
    RELEASE,
    agent_exec,
)

IMAGES = ["agent", "fake-llm", "git-server"]
MEMORY_LIMIT = "1Gi"
# By the chart's name: the release's verify CronJob carries the backup labels too.
BACKUP_CRONJOB = f"{RELEASE}-hermes-agent-backup"
VALUES = {
    **images.agent_values(),
    "lcm": {"embeddings": {"mode": "off"}},
    "tests": {"enabled": False},
    # The chart's default startup probe, spelled out: a replacement pod is only Ready once it
    # passed, so its period is outage.
    "agent": {
        "startupProbe": {"periodSeconds": 1, "failureThreshold": 600},
        # The memory kill's ballast fills this limit (the chart's default limit is 2Gi).
        "resources": {"requests": {"memory": "512Mi"}, "limits": {"memory": MEMORY_LIMIT}},
    },
}
SETTLE = 3.0  # seconds of records kept after recovery, so the window holds the whole fault
SYNC_GRACE = 5.0  # answered this recently: the turn's LCM sync may still be pending
# Makes a backup run last seconds (incompressible, so no target shortens it).
BALLAST = "head -c 536870912 /dev/urandom > /opt/data/fault-ballast.bin"
# Run in the backup container as soon as it runs: SIGKILL of `hermes-runtime backup create`
# while it or its restic child has the ballast open (create stages the file, then restic
# uploads the staged copy: either is mid-run on any machine speed); prints the pid.
KILL_BACKUP = """
import os, signal, sys, time

def processes():
    found = {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as handle:
                command = handle.read().split(b"\\0")
            with open(f"/proc/{pid}/stat") as handle:
                parent = int(handle.read().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        found[int(pid)] = (command, parent)
    return found

def creator(found):
    for pid, (command, _) in found.items():
        if b"backup" in command and b"create" in command:
            return pid

def family(found, root):
    members = {root}
    while True:
        more = {pid for pid, (_, parent) in found.items() if parent in members} - members
        if not more:
            return members
        members |= more

def reading_ballast(pid):
    try:
        return any(
            os.readlink(f"/proc/{pid}/fd/{fd}").endswith("fault-ballast.bin")
            for fd in os.listdir(f"/proc/{pid}/fd")
        )
    except OSError:
        return False

deadline = time.monotonic() + 120
while time.monotonic() < deadline:
    found = processes()
    pid = creator(found)
    if pid and any(reading_ballast(member) for member in family(found, pid)):
        os.kill(pid, signal.SIGKILL)
        print(pid)
        sys.exit(0)
    time.sleep(0.005)
sys.exit("backup create never opened the ballast")
"""
# SIGKILL of the gateway child: its pid file is the gateway's own (bench/agent_faults.py too).
KILL_GATEWAY = (
    "import json, os, signal; "
    "os.kill(json.load(open('/opt/data/gateway.pid'))['pid'], signal.SIGKILL)"
)

# A memory kill mid-turn, by the kernel: in the agent container, the gateway is made the OOM
# killer's first choice (oom_score_adj 1000: a process may raise its own user's score), then a
# ballast fills the container's memory cgroup 16 MiB at a time with pages of a memfd: charged
# to the cgroup, yet in no process's RSS (the OOM killer ranks processes by RSS plus their
# score, and every process of the container has a score near 1000 here: a ballast holding
# anonymous memory would be the one killed). Out of memory, the kernel kills the gateway (the
# cgroup's whole task list under cgroup v2 with memory.oom.group: the container restarts
# then). The ballast stops, freeing its pages, as soon as the gateway is gone (or its own exec
# dies with the container); prints how many MiB it held. Unlike the SIGKILL above, this one is
# the kernel's, at the container's limit, while turns are in flight.
OOM_KILL_GATEWAY = """
import json, os, sys, time
pid = json.load(open('/opt/data/gateway.pid'))['pid']
with open(f'/proc/{pid}/oom_score_adj', 'w') as handle:
    handle.write('1000')
ballast = os.memfd_create('fault-ballast')
chunk = b'\\x01' * (16 << 20)
held, deadline = 0, time.monotonic() + 120
def alive():
    try:
        with open(f'/proc/{pid}/stat') as handle:
            return handle.read().rsplit(')', 1)[1].split()[0] != 'Z'
    except OSError:
        return False
while alive() and time.monotonic() < deadline:
    os.write(ballast, chunk)
    held += 16
os.close(ballast)
print(held, 'alive' if alive() else 'gone')
sys.exit(0 if not alive() else 'the gateway outlived 120 s of ballast')
"""


@dataclass(frozen=True)
class Fault:
    name: str
    inject: Callable[[kube.Cluster, str], None]
    replaces_pod: bool = True


def agent_pods(cluster: kube.Cluster, namespace: str) -> list[client.V1Pod]:
    return list(cluster.core.list_namespaced_pod(namespace, label_selector=AGENT_SELECTOR).items)


def serving_pod(cluster: kube.Cluster, namespace: str) -> client.V1Pod:
    (pod,) = [p for p in agent_pods(cluster, namespace) if p.metadata.deletion_timestamp is None]
    return pod


def only_new_pod_ready(cluster: kube.Cluster, namespace: str, old_uid: str) -> bool:
    pods = agent_pods(cluster, namespace)
    if len(pods) != 1 or pods[0].metadata.uid == old_uid:
        return False
    conditions = pods[0].status.conditions or []
    return any(c.type == "Ready" and c.status == "True" for c in conditions)


def delete_pod(*flags: str) -> Callable[[kube.Cluster, str], None]:
    def inject(cluster: kube.Cluster, namespace: str) -> None:
        name = serving_pod(cluster, namespace).metadata.name
        kube.kubectl(cluster, namespace, "delete", "pod", name, "--wait=false", *flags)

    return inject


def kill_gateway(cluster: kube.Cluster, namespace: str) -> None:
    agent_exec(cluster, namespace, ["python3", "-c", KILL_GATEWAY])


def oom_kill_gateway(cluster: kube.Cluster, namespace: str) -> None:
    """The kernel kills the gateway at the container's memory limit (OOM_KILL_GATEWAY); the
    exec may die with it (whole-container OOM kill): then the container's restart is proof."""
    pod = serving_pod(cluster, namespace).metadata.name
    restarts = lib.agent_container_restarts(cluster, namespace)
    result = kube.exec_in_container(
        cluster, namespace, pod, "agent", ["python3", "-c", OOM_KILL_GATEWAY], timeout=180
    )
    print(f"memory kill: ballast {result.stdout.strip()!r} exit {result.returncode}")
    if result.returncode != 0 or "alive" in result.stdout:
        kube.wait_until(
            lambda: lib.agent_container_restarts(cluster, namespace) > restarts,
            60,
            f"memory kill: the gateway or the agent container of {pod} killed",
        )


def rollout_restart(cluster: kube.Cluster, namespace: str) -> None:
    (deployment,) = cluster.apps.list_namespaced_deployment(
        namespace, label_selector=AGENT_SELECTOR
    ).items
    kube.kubectl(cluster, namespace, "rollout", "restart", f"deployment/{deployment.metadata.name}")


def kill_backup_job(cluster: kube.Cluster, namespace: str) -> None:
    """A backup Job's `backup create` killed with SIGKILL mid-run, then the Job deleted.

    A ballast file makes the run last (small databases back up in well under a second), and
    the kill comes from inside the container the moment `backup create` reads the ballast,
    instead of racing a pod deletion against the upload on a fast machine. The killed run
    must not have finished: the test says "mid-run".
    """
    agent_exec(cluster, namespace, ["sh", "-c", BALLAST])
    job = kube.unique_name("backup-killed")
    kube.kubectl(cluster, namespace, "create", "job", job, f"--from=cronjob/{BACKUP_CRONJOB}")
    running: list[str] = []

    def backup_running() -> bool:
        pods = cluster.core.list_namespaced_pod(namespace, label_selector=f"job-name={job}")
        running.extend(p.metadata.name for p in pods.items if p.status.phase == "Running")
        return bool(running)

    kube.wait_until(backup_running, 240, f"backup job {job} running", interval=0.2)
    killed = kube.exec_in_container(
        cluster, namespace, running[0], "backup", ["python3", "-c", KILL_BACKUP], timeout=180
    )
    log = kube.pod_log(cluster, namespace, running[0], "backup")
    ended = backup_container_exit_code(cluster, namespace, running[0])
    kube.kubectl(cluster, namespace, "delete", "job", job, "--wait=false")
    # The container ends with `backup create`, and the runtime may take the exec down with it
    # (exit 137) before it prints: then the container's own exit status is the proof.
    assert (killed.returncode == 0 and killed.stdout.strip()) or (
        killed.returncode == 137 and ended not in (None, 0)
    ), f"backup not killed: {killed}, backup container exit code {ended}"
    assert "backup.create.finished" not in log, f"the backup finished before the kill:\n{log}"


def backup_container_exit_code(cluster: kube.Cluster, namespace: str, pod: str) -> int | None:
    """The backup container's exit code once it has ended (waits up to 30 s), else None."""
    code: list[int] = []

    def ended() -> bool:
        status = cluster.core.read_namespaced_pod(pod, namespace).status
        for container in status.container_statuses or []:
            terminated = container.name == "backup" and container.state.terminated
            if terminated:
                code.append(int(terminated.exit_code))
        return bool(code)

    try:
        kube.wait_until(ended, 30, f"backup container of {pod} ended", interval=0.2)
    except AssertionError:
        return None
    return code[0]


FAULTS = [
    Fault("graceful delete", delete_pod()),
    Fault("forced delete", delete_pod("--grace-period=0", "--force")),
    Fault("gateway kill -9 #1", kill_gateway, replaces_pod=False),
    Fault("gateway kill -9 #2", kill_gateway, replaces_pod=False),
    Fault("gateway kill -9 #3", kill_gateway, replaces_pod=False),
    Fault("memory kill mid-turn", oom_kill_gateway, replaces_pod=False),
    Fault("rollout restart", rollout_restart),
    Fault("backup job killed", kill_backup_job, replaces_pod=False),
]


# The entrypoint's log events that time a hand-over or a restart (agent/*.py).
TIMELINE_EVENTS = {
    "agent.pre_stop",
    "agent.lock.successor",
    "agent.lock.acquired",
    "agent.gateway.crashed",
    "agent.gateway.start",
    "agent.gateway.stopped",
    "agent.handover.successor_ready",
}


def read_agent_log(cluster: kube.Cluster, namespace: str, pod: str, since: float) -> str:
    """The agent container's log since ``since`` ("" once the pod is gone)."""
    try:
        response = cluster.core.read_namespaced_pod_log(
            pod,
            namespace,
            container="agent",
            since_seconds=int(time.time() - since) + 5,
            _preload_content=False,
        )
    except client.ApiException:
        return ""
    return str(response.data.decode("utf-8", errors="replace"))


def entrypoint_events(pod: str, log: str, since: float) -> list[str]:
    """``+seconds pod event detail`` of the pod's timing events after ``since``."""
    lines = []
    for line in log.splitlines():
        with contextlib.suppress(ValueError, TypeError, AttributeError):
            record = json.loads(line)
            if record.get("event") in TIMELINE_EVENTS and record.get("ts", 0) >= since:
                keep = ("waited_seconds", "successor", "restart_in", "pid")
                detail = " ".join(f"{k}={record[k]}" for k in keep if k in record)
                lines.append(f"+{record['ts'] - since:.2f} {pod[-5:]} {record['event']} {detail}")
    return lines


def timeline(found: lib.Records, start: float, end: float, events: list[str]) -> str:
    """What happened when, relative to the injection: /health changes and the pods' events,
    so a long outage says where it went (printed, never asserted)."""
    health = [
        f"+{h.at - start:.2f} /health {'up' if h.up else 'down'} {h.detail[:60]}"
        for h in found.health
        if start <= h.at < end
    ]
    merged = sorted(health + events, key=lambda line: float(line.split()[0]))
    return "".join(f"    {line}\n" for line in merged)


def run_fault(cluster: kube.Cluster, namespace: str, fault: Fault) -> FaultFigures:
    """Inject, wait until both clients are answered again, check the data; the figures."""
    old_uid = serving_pod(cluster, namespace).metadata.uid
    start = time.time()
    fault.inject(cluster, namespace)
    injected = time.time()
    if fault.replaces_pod:
        kube.wait_until(
            lambda: only_new_pod_ready(cluster, namespace, old_uid),
            300,
            f"{fault.name}: one new agent pod Ready",
        )
    lib.wait_answered(cluster, namespace, time.time() if fault.replaces_pod else injected)
    # The serving pod's events (a replaced pod's log is gone with it).
    serving = serving_pod(cluster, namespace).metadata.name
    events = entrypoint_events(serving, read_agent_log(cluster, namespace, serving, start), start)
    end = time.time() + SETTLE
    time.sleep(SETTLE)
    found = lib.records(cluster, namespace)
    checked = lib.check_data(cluster, namespace, found, end - SYNC_GRACE)
    snapshots = lib.listed_snapshots(cluster, namespace)
    half = [s for s in snapshots if s["status"] != "ok"]
    assert not half, f"{fault.name}: backup list shows incomplete snapshots: {half}"
    figures = fault_figures(found.attempts, found.health, start, end)
    errors = sorted(
        {a.error.split(":")[0] for a in found.attempts if start <= a.started < end and not a.ok}
    )
    print(
        f"fault {fault.name:<20} outage {figures.outage_s:5.2f} s  "
        f"failed requests {figures.failed_requests:3d} ({figures.turns_hit} turns)  "
        f"longest connect {figures.longest_connect_s:5.2f} s  "
        f"max latency {figures.max_latency_s:5.2f} s  "
        f"answered {figures.answered:3d}  "
        f"(LCM checked {checked.checked} turns, {len(snapshots)} snapshots listed)"
        + (
            f"  answered twice (killed before the idempotency commit): {checked.resent}"
            if checked.resent
            else ""
        )
        + (f"  errors: {', '.join(errors)}" if errors else "")
        + "\n"
        + timeline(found, start, end, events),
        flush=True,
    )
    return figures


@pytest.mark.timeout(1500)
def test_faults_lose_and_duplicate_no_answered_turn(
    cluster: kube.Cluster,
    namespace: str,
    helm: kube.Helm,
    tmp_path: Path,
) -> None:
    images.require(IMAGES)
    began = time.monotonic()
    lib.install_backends(helm)
    values = tmp_path / "faults.yaml"
    values.write_text(json.dumps(VALUES))
    helm.install(RELEASE, CHART, values=[CI_VALUES, values], timeout="5m")
    lib.start_load(cluster, namespace)
    lib.wait_answered(cluster, namespace, 0.0)
    kube.run_job_from_cronjob(cluster, namespace, BACKUP_CRONJOB)
    print(f"\ninstalled, load running and one backup made in {time.monotonic() - began:.0f} s")

    results = {fault.name: run_fault(cluster, namespace, fault) for fault in FAULTS}

    final = lib.records(cluster, namespace)
    answered = sum(1 for a in final.attempts if a.ok)
    failed = sum(1 for a in final.attempts if not a.ok)
    print(
        f"{answered} turns answered, {failed} failed attempts in all; "
        f"total {time.monotonic() - began:.0f} s"
    )
    assert len(results) == len(FAULTS)
    assert answered > len(FAULTS) * 2, f"too little load to judge: {answered} answered turns"
