"""Helpers of the multi-node tier: nodes, cordons and drains, pods pinned where a scenario
needs them, and the agent's load pod kept off the workers a scenario drains."""

from __future__ import annotations

import contextlib
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass

from e2e import faults_testlib as lib
from e2e import images, kube
from kubernetes import client

SHARED_CLASS = "shared-path"  # ci/kind/shared-path-storage.yaml: one filesystem on every node
LOCAL_CLASS = "local-path"  # the node image's default: a directory of one node
CONTROL_PLANE = "node-role.kubernetes.io/control-plane"
HOSTNAME = "kubernetes.io/hostname"


def ready(conditions: list[client.V1NodeCondition] | None) -> bool:
    return any(c.type == "Ready" and c.status == "True" for c in conditions or [])


def workers(cluster: kube.Cluster) -> list[str]:
    """The schedulable worker nodes' names (no control-plane label, not cordoned)."""
    nodes = cluster.core.list_node().items
    return sorted(
        n.metadata.name
        for n in nodes
        if CONTROL_PLANE not in (n.metadata.labels or {}) and not n.spec.unschedulable
    )


def cordon(cluster: kube.Cluster, node: str, on: bool) -> None:
    cluster.core.patch_node(node, {"spec": {"unschedulable": on}})


@contextlib.contextmanager
def cordoned(cluster: kube.Cluster, node: str) -> Iterator[None]:
    """The node cordoned for the block, uncordoned after it whatever happened (the next
    scenario needs every worker)."""
    cordon(cluster, node, True)
    try:
        yield
    finally:
        cordon(cluster, node, False)


@dataclass(frozen=True)
class Drain:
    returncode: int
    output: str
    seconds: float


def drain(cluster: kube.Cluster, node: str, timeout_s: int) -> Drain:
    """`kubectl drain` as an operator runs it (daemonsets stay, emptyDirs go); the node stays
    cordoned, whatever the outcome, until the caller uncordons it."""
    start = time.monotonic()
    done = subprocess.run(
        [
            kube.tool("kubectl"),
            "--kubeconfig",
            str(cluster.kubeconfig),
            "drain",
            node,
            "--ignore-daemonsets",
            "--delete-emptydir-data",
            f"--timeout={timeout_s}s",
        ],
        capture_output=True,
        text=True,
        timeout=timeout_s + 60,
        check=False,
    )
    return Drain(done.returncode, done.stdout + done.stderr, time.monotonic() - start)


def on_control_plane(pod: client.V1Pod) -> client.V1Pod:
    """Pinned to the control plane (tolerating its taint): no worker drain evicts it."""
    pod.spec.affinity = None
    pod.spec.node_selector = {CONTROL_PLANE: ""}
    pod.spec.tolerations = [
        client.V1Toleration(key=CONTROL_PLANE, operator="Exists", effect="NoSchedule")
    ]
    return pod


def start_load_off_workers(cluster: kube.Cluster, namespace: str) -> None:
    """The fault suite's load pod (tests/support/chat_load.py: two clients that retry every
    failed turn with its Idempotency-Key) on the control plane, without the backup volume it
    would otherwise mount (that one ties it to the agent's node)."""
    pod = lib.load_pod(cluster, namespace)
    container = pod.spec.containers[0]
    container.volume_mounts = [m for m in container.volume_mounts if m.name != "backup"]
    container.env = [e for e in container.env if e.name != "RESTIC_PASSWORD"]
    pod.spec.volumes = [v for v in pod.spec.volumes if v.name != "backup"]
    cluster.core.create_namespaced_pod(namespace, on_control_plane(pod))
    kube.wait_until(
        lambda: cluster.core.read_namespaced_pod(lib.LOAD_POD, namespace).status.phase == "Running",
        180,
        f"load pod {namespace}/{lib.LOAD_POD} running",
    )


def volume_pod(name: str, claim: str, script: str) -> client.V1Pod:
    """A one-shot restricted busybox pod running ``script`` with the claim at /data."""
    pod = kube.restricted_pod(name, images.ref("busybox"), ["sh", "-c", script])
    pod.spec.containers[0].volume_mounts = [client.V1VolumeMount(name="data", mount_path="/data")]
    pod.spec.volumes = [
        client.V1Volume(
            name="data",
            persistent_volume_claim=client.V1PersistentVolumeClaimVolumeSource(claim_name=claim),
        )
    ]
    return pod


@dataclass(frozen=True)
class Ran:
    node: str
    logs: str


def run_to_end(cluster: kube.Cluster, namespace: str, pod: client.V1Pod) -> Ran:
    """Run a one-shot pod until it succeeds; its node and log (the pod deleted after)."""
    name = pod.metadata.name
    cluster.core.create_namespaced_pod(namespace, pod)
    try:

        def ended() -> bool:
            phase = cluster.core.read_namespaced_pod(name, namespace).status.phase
            return phase in ("Succeeded", "Failed")

        kube.wait_until(ended, 180, f"pod {namespace}/{name} to end")
        found = cluster.core.read_namespaced_pod(name, namespace)
        logs = kube.pod_log(cluster, namespace, name)
        assert found.status.phase == "Succeeded", f"{name} failed on {found.spec.node_name}: {logs}"
        return Ran(str(found.spec.node_name), logs)
    finally:
        cluster.core.delete_namespaced_pod(name, namespace, grace_period_seconds=0)


def claim(cluster: kube.Cluster, namespace: str, name: str, storage_class: str) -> None:
    cluster.core.create_namespaced_persistent_volume_claim(
        namespace,
        client.V1PersistentVolumeClaim(
            metadata=client.V1ObjectMeta(name=name),
            spec=client.V1PersistentVolumeClaimSpec(
                access_modes=["ReadWriteOnce"],
                storage_class_name=storage_class,
                resources=client.V1VolumeResourceRequirements(requests={"storage": "16Mi"}),
            ),
        ),
    )


def bound_volume(cluster: kube.Cluster, namespace: str, name: str) -> client.V1PersistentVolume:
    found = cluster.core.read_namespaced_persistent_volume_claim(name, namespace)
    assert found.status.phase == "Bound", f"PVC {name} is {found.status.phase}"
    return cluster.core.read_persistent_volume(found.spec.volume_name)
