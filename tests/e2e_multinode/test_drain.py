"""`kubectl drain` of the agent's node under chat load, for each kind of storage.

The load is the fault suite's (tests/support/chat_load.py in a pod on the control plane: two
clients, each failed turn retried with its Idempotency-Key until answered). After each drain:
every answered (HTTP 200) turn is in LCM exactly once and the databases pass integrity_check
(tests/e2e/faults_testlib.check_data), and the agent pods' own logs, followed from the install
on, show at most one gateway serving at any moment (nodes_testlib.assert_one_gateway_at_a_time);
the outage and failed requests are printed, never asserted.

- `shared-path` (a filesystem every node mounts: NFS, EFS, Filestore on a cloud): the drain
  evicts the agent, its successor starts on another worker with the same volume, and the agent
  answers again from there. Then, with every worker schedulable again, a Job from the backup
  CronJob lands on the agent's new node (its required podAffinity to the agent pod) and makes
  a snapshot.
- `local-path` (a node's own disk) with `podDisruptionBudget.enabled` (maxUnavailable 0, as
  values.yaml says: "voluntary evictions such as node drains wait until you move the agent
  yourself"): the drain is refused naming the budget, and the agent keeps serving on its node.
- `local-path` with the chart's defaults (no budget): the drain evicts the agent, its successor
  cannot leave the drained node (its PV is pinned there) and stays Pending with a
  FailedScheduling event saying so; the agent answers again once the node is uncordoned.
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import Any

import pytest
from e2e import faults_testlib as lib
from e2e import images, kube
from e2e.test_faults import (
    BACKUP_CRONJOB,
    IMAGES,
    SETTLE,
    SYNC_GRACE,
    VALUES,
    agent_pods,
    entrypoint_events,
    only_new_pod_ready,
    read_agent_log,
    serving_pod,
    timeline,
)
from e2e.test_scenario_conversation import CHART, CI_VALUES, RELEASE
from kubernetes import client
from support.chat_load import FaultFigures, fault_figures

from . import nodes_testlib as nodes
from . import packetpath_testlib as packetpath

DRAIN_TIMEOUT_S = 300
REFUSED_DRAIN_TIMEOUT_S = 20  # long enough for kubectl to retry the refused eviction
# The scheduler's words for a node a pinned PV rules out (Kubernetes 1.34; older: "volume node
# affinity conflict").
PENDING_REASONS = ("didn't match PersistentVolume's node affinity", "volume node affinity conflict")
SNAPSHOT_ID = re.compile(r"^[0-9a-f]{64}$", re.M)  # `backup create` prints restic's full id last


def install(
    cluster: kube.Cluster,
    namespace: str,
    helm: kube.Helm,
    tmp_path: Path,
    extra: dict[str, Any],
    gateways: nodes.GatewayWatch,
) -> client.V1Pod:
    """The backends, the chart with ci.yaml, the fault suite's values and ``extra``; the load
    running and answered, the agent pods' logs followed; the serving agent pod."""
    images.require(IMAGES)
    began = time.monotonic()
    lib.install_backends(helm)
    values = tmp_path / "drain.yaml"
    values.write_text(json.dumps({**VALUES, **extra}))
    helm.install(RELEASE, CHART, values=[CI_VALUES, values], timeout="5m")
    nodes.start_load_off_workers(cluster, namespace)
    packetpath.wait_answered(cluster, namespace, 0.0)
    agent = serving_pod(cluster, namespace)
    gateways.start()
    took = time.monotonic() - began
    print(f"\ninstalled on {agent.spec.node_name}, load answered in {took:.0f} s")
    return agent


def settle_and_check(
    cluster: kube.Cluster,
    namespace: str,
    start: float,
    what: str,
    watch: nodes.GatewayWatch,
    verb: str = "drain",
) -> tuple[FaultFigures, list[nodes.Hold]]:
    """Both clients answered again, then every answered turn in LCM once and one gateway at a
    time; the figures, the holds, and what happened when (/health and the serving pod's
    entrypoint events)."""
    packetpath.wait_answered(cluster, namespace, time.time())
    serving = serving_pod(cluster, namespace).metadata.name
    events = entrypoint_events(serving, read_agent_log(cluster, namespace, serving, start), start)
    end = time.time() + SETTLE
    time.sleep(SETTLE)
    found = lib.records(cluster, namespace)
    checked = lib.check_data(cluster, namespace, found, end - SYNC_GRACE)
    figures = fault_figures(found.attempts, found.health, start, end)
    holds = nodes.assert_one_gateway_at_a_time(watch, found.attempts, start)
    print(
        f"{verb} {what:<28} outage {figures.outage_s:6.2f} s  "
        f"failed requests {figures.failed_requests:3d} ({figures.turns_hit} turns)  "
        f"max latency {figures.max_latency_s:6.2f} s  answered {figures.answered:3d}  "
        f"(LCM checked {checked.checked} turns, 0 lost)\n" + timeline(found, start, end, events),
        flush=True,
    )
    return figures, holds


@pytest.mark.timeout(1200)
def test_drain_moves_an_agent_on_shared_storage_to_another_node(
    cluster: kube.Cluster,
    namespace: str,
    helm: kube.Helm,
    tmp_path: Path,
    gateways: nodes.GatewayWatch,
) -> None:
    # The agent pod mounts the backup volume too (backup.target.type pvc): both shared.
    shared = {
        "persistence": {"storageClass": nodes.SHARED_CLASS},
        "backup": {"target": {"pvc": {"storageClass": nodes.SHARED_CLASS}}},
    }
    old = install(cluster, namespace, helm, tmp_path, shared, gateways)
    node = str(old.spec.node_name)
    start = time.time()
    try:
        drained = nodes.drain(cluster, node, DRAIN_TIMEOUT_S)
        assert drained.returncode == 0, drained.output
        kube.wait_until(
            lambda: only_new_pod_ready(cluster, namespace, old.metadata.uid),
            300,
            "the agent's successor Ready on another node",
        )
        new = serving_pod(cluster, namespace)
        assert new.spec.node_name != node, f"the successor runs on the drained node {node}"
        figures, holds = settle_and_check(cluster, namespace, start, "shared-path", gateways)
        assert [h.node for h in holds[-2:]] == [node, new.spec.node_name], holds
        print(f"  kubectl drain took {drained.seconds:.1f} s; {node} -> {new.spec.node_name}")
    finally:
        nodes.cordon(cluster, node, False)
    assert figures.answered > 0
    began = time.monotonic()
    ran, snapshot = backup_now(cluster, namespace)
    assert ran == new.spec.node_name, f"the backup ran on {ran}, the agent on {new.spec.node_name}"
    took = time.monotonic() - began
    print(f"  backup Job on {ran}, the agent's node: snapshot {snapshot[:8]} in {took:.1f} s")


def backup_now(cluster: kube.Cluster, namespace: str) -> tuple[str, str]:
    """A Job from the backup CronJob (what an operator does), run to success: the node its
    pod ran on and the snapshot id its log names."""
    job = kube.run_job_from_cronjob(cluster, namespace, BACKUP_CRONJOB)
    (pod,) = cluster.core.list_namespaced_pod(namespace, label_selector=f"job-name={job}").items
    log = "".join(
        kube.pod_log(cluster, namespace, pod.metadata.name, c.name) for c in pod.spec.containers
    )
    ids = set(SNAPSHOT_ID.findall(log))
    assert len(ids) == 1, f"expected one snapshot id in the backup log: {ids}\n{log}"
    return str(pod.spec.node_name), ids.pop()


@pytest.mark.timeout(1200)
def test_drain_waits_for_an_agent_on_node_local_storage_with_a_budget(
    cluster: kube.Cluster,
    namespace: str,
    helm: kube.Helm,
    tmp_path: Path,
    gateways: nodes.GatewayWatch,
) -> None:
    extra = {
        "persistence": {"storageClass": nodes.LOCAL_CLASS},
        "podDisruptionBudget": {"enabled": True, "maxUnavailable": 0},
    }
    old = install(cluster, namespace, helm, tmp_path, extra, gateways)
    node = str(old.spec.node_name)
    start = time.time()
    try:
        drained = nodes.drain(cluster, node, REFUSED_DRAIN_TIMEOUT_S)
        assert drained.returncode != 0, f"the drain went through:\n{drained.output}"
        assert "disruption budget" in drained.output, drained.output
        still = serving_pod(cluster, namespace)
        assert (still.metadata.uid, still.spec.node_name) == (old.metadata.uid, node)
        _, holds = settle_and_check(cluster, namespace, start, "local-path, budget 0", gateways)
        assert [h.pod for h in holds] == [old.metadata.name], holds
        print(f"  kubectl drain refused after {drained.seconds:.1f} s: {drained.output[-300:]}")
    finally:
        nodes.cordon(cluster, node, False)


def pending_for_its_volume(cluster: kube.Cluster, namespace: str, old_uid: str) -> bool:
    """The successor Pending, the scheduler's FailedScheduling event naming the pinned PV."""
    pods = [p for p in agent_pods(cluster, namespace) if p.metadata.uid != old_uid]
    if len(pods) != 1 or pods[0].status.phase != "Pending":
        return False
    events = cluster.core.list_namespaced_event(
        namespace, field_selector=f"involvedObject.name={pods[0].metadata.name}"
    ).items
    return any(
        e.reason == "FailedScheduling" and any(r in (e.message or "") for r in PENDING_REASONS)
        for e in events
    )


@pytest.mark.timeout(1200)
def test_drain_of_an_agent_on_node_local_storage_waits_for_uncordon(
    cluster: kube.Cluster,
    namespace: str,
    helm: kube.Helm,
    tmp_path: Path,
    gateways: nodes.GatewayWatch,
) -> None:
    local = {"persistence": {"storageClass": nodes.LOCAL_CLASS}}
    old = install(cluster, namespace, helm, tmp_path, local, gateways)
    node = str(old.spec.node_name)
    start = time.time()
    try:
        drained = nodes.drain(cluster, node, DRAIN_TIMEOUT_S)
        assert drained.returncode == 0, drained.output
        kube.wait_until(
            lambda: pending_for_its_volume(cluster, namespace, old.metadata.uid),
            120,
            f"the successor Pending with a FailedScheduling event naming {PENDING_REASONS[0]!r}",
        )
        pending_at = time.time()
    finally:
        nodes.cordon(cluster, node, False)
    uncordoned_at = time.time()
    kube.wait_until(
        lambda: only_new_pod_ready(cluster, namespace, old.metadata.uid),
        300,
        "the successor Ready once the node is uncordoned",
    )
    assert serving_pod(cluster, namespace).spec.node_name == node
    _, holds = settle_and_check(cluster, namespace, start, "local-path, no budget", gateways)
    assert [h.node for h in holds] == [node, node], holds
    print(
        f"  kubectl drain took {drained.seconds:.1f} s; successor Pending (volume pinned to "
        f"{node}) {pending_at - start:.1f} s after the drain began; Ready again "
        f"{time.time() - uncordoned_at:.1f} s after the uncordon"
    )
