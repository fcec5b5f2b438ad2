"""Pod routes between the kind nodes: every node routes every other node's pod CIDR to it.

Why a scenario waits for them: kube-router routes each node's pod CIDR to the other nodes over
BGP. While a peering is missing (a node that joined or came back after the others' kube-router
read the node list: they log "Can't find configuration for a new passive connection" until
their next periodic sync, minutes later), pods on that node and pods on the others cannot
reach each other, though every node and pod is Ready: the load pod on the control plane then
fails every request to an agent on that worker. The routes are read from each node's own table
(`ip route` through `podman exec`); on a cluster whose nodes are not podman containers of this
host there is nothing to read and nothing is waited for.
"""

from __future__ import annotations

import shutil
import subprocess
import time

from e2e import kube
from kubernetes import client

ROUTES_TIMEOUT_S = 420  # kube-router's periodic sync (5 min) and a margin
POLL_S = 5.0


def internal_ip(node: client.V1Node) -> str:
    addresses = node.status.addresses or []
    return next((str(a.address) for a in addresses if a.type == "InternalIP"), "")


def route_table(node: str) -> str | None:
    """The node's routing table; None when the node is no podman container here."""
    podman = shutil.which("podman")
    if podman is None:
        return None
    done = subprocess.run(
        [podman, "exec", node, "ip", "route"], capture_output=True, text=True, check=False
    )
    return done.stdout if done.returncode == 0 else None


def missing_routes(cluster: kube.Cluster) -> list[str] | None:
    """Each route a node lacks to another node's pod CIDR (via that node's address); None when
    the routes cannot be read (not a kind cluster of this host)."""
    nodes = cluster.core.list_node().items
    peers = {n.metadata.name: (n.spec.pod_cidr, internal_ip(n)) for n in nodes}
    missing = []
    for name in peers:
        table = route_table(name)
        if table is None:
            return None
        missing += [
            f"{name} has no route {cidr} via {address} ({other})"
            for other, (cidr, address) in peers.items()
            if other != name and cidr and f"{cidr} via {address} " not in table
        ]
    return missing


def wait_for_pod_routes(cluster: kube.Cluster, timeout: float = ROUTES_TIMEOUT_S) -> float:
    """Wait until no node lacks a route to another's pod CIDR; the seconds waited. Fails
    naming the routes still missing."""
    began = time.monotonic()
    while (missing := missing_routes(cluster)) and time.monotonic() - began < timeout:
        time.sleep(POLL_S)
    assert not missing, f"pod routes missing after {timeout} s: {missing}"
    return time.monotonic() - began
