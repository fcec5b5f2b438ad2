"""The multi-node cluster itself: every node Ready with its NetworkPolicy enforcer, pods on
one worker reaching pods on another and the API server, both StorageClasses provisioning, and a
`shared-path` volume following its pod to another node.

`local-path` volumes live in one node's directory (their PV is pinned to that node, like a
local NVMe disk); `shared-path` volumes live on a filesystem every node mounts (no node
affinity, like NFS, EFS or Filestore): a pod started again with a node affinity that keeps it
off its first node lands on another node and finds its file there.
"""

from __future__ import annotations

import os

import pytest
from e2e import images, kube

from . import nodes_testlib as nodes

KUBE_ROUTER = "k8s-app=kube-router"  # the DaemonSet of the node image's default CNI
BUSYBOX = images.ref("busybox")
SERVE = "mkdir -p /tmp/w && echo cross-node > /tmp/w/index.html && exec httpd -f -p 8080 -h /tmp/w"
# Retried for a while: a new pod's routes reach the other nodes a moment after it starts.
PROBE = (
    "for i in $(seq 30); do wget -q -O - http://{address}:8080/ && break; sleep 1; done; "
    'echo | nc -w 5 "$KUBERNETES_SERVICE_HOST" "$KUBERNETES_SERVICE_PORT" && '
    "echo api-server-reached"
)


def test_every_node_is_ready_and_runs_kube_router(cluster: kube.Cluster) -> None:
    found = cluster.core.list_node().items
    expected = int(os.environ.get("HERMES_MULTINODE_NODES", "0")) or len(found)
    assert len(found) == expected >= 3, [n.metadata.name for n in found]
    not_ready = [n.metadata.name for n in found if not nodes.ready(n.status.conditions)]
    assert not not_ready, f"nodes not Ready: {not_ready}"
    assert len(nodes.workers(cluster)) >= 2, "a control plane plus at least two workers"
    routers = cluster.core.list_namespaced_pod("kube-system", label_selector=KUBE_ROUTER).items
    serving = {
        p.spec.node_name
        for p in routers
        if p.status.phase == "Running" and all(s.ready for s in p.status.container_statuses or [])
    }
    assert serving == {n.metadata.name for n in found}, f"kube-router Ready on {serving}"


@pytest.mark.timeout(600)
def test_a_pod_reaches_a_pod_on_another_worker_and_the_api_server(
    cluster: kube.Cluster, namespace: str
) -> None:
    """Traffic between nodes crosses the host's bridge (ci/kind/multi-up.sh lets it through)."""
    first, second = nodes.workers(cluster)[:2]
    server = kube.restricted_pod("server", BUSYBOX, ["sh", "-c", SERVE])
    server.spec.node_name = first
    cluster.core.create_namespaced_pod(namespace, server)

    def serving() -> bool:
        found = cluster.core.read_namespaced_pod("server", namespace)
        return found.status.phase == "Running" and bool(found.status.pod_ip)

    kube.wait_until(serving, 120, f"server pod Running on {first}")
    address = cluster.core.read_namespaced_pod("server", namespace).status.pod_ip
    probe = kube.restricted_pod("probe", BUSYBOX, ["sh", "-c", PROBE.format(address=address)])
    probe.spec.node_name = second
    ran = nodes.run_to_end(cluster, namespace, probe)
    assert ran.logs.split() == ["cross-node", "api-server-reached"], ran.logs


@pytest.mark.timeout(600)
def test_local_path_volume_stays_on_its_node(cluster: kube.Cluster, namespace: str) -> None:
    nodes.claim(cluster, namespace, "local", nodes.LOCAL_CLASS)
    wrote = nodes.run_to_end(
        cluster, namespace, nodes.volume_pod("writer", "local", "echo local > /data/f")
    )
    volume = nodes.bound_volume(cluster, namespace, "local")
    terms = volume.spec.node_affinity.required.node_selector_terms
    pinned = {v for t in terms for e in t.match_expressions for v in e.values}
    assert pinned == {wrote.node}, f"PV {volume.metadata.name} pinned to {pinned}"
    read = nodes.run_to_end(cluster, namespace, nodes.volume_pod("reader", "local", "cat /data/f"))
    assert (read.node, read.logs.strip()) == (wrote.node, "local")


@pytest.mark.timeout(600)
def test_shared_path_volume_follows_its_pod_to_another_node(
    cluster: kube.Cluster, namespace: str
) -> None:
    nodes.claim(cluster, namespace, "shared", nodes.SHARED_CLASS)
    wrote = nodes.run_to_end(
        cluster,
        namespace,
        nodes.volume_pod("writer", "shared", "echo shared-from-$(hostname) > /data/f"),
    )
    volume = nodes.bound_volume(cluster, namespace, "shared")
    assert volume.spec.node_affinity is None, volume.spec.node_affinity
    reader = nodes.away_from(nodes.volume_pod("reader", "shared", "cat /data/f"), wrote.node)
    read = nodes.run_to_end(cluster, namespace, reader)
    assert read.node != wrote.node, f"the reader ran on the writer's node {wrote.node}"
    assert read.logs.strip() == "shared-from-writer", read.logs
