"""The path of the load pod's requests to the agent, read from the nodes when it refuses them,
and the path's kube-router and kube-proxy restarted once when it refuses them to a Ready agent.

Why: a request from the load pod (on the control plane) to the agent's Service crosses
kube-proxy on the control plane (DNAT to the agent pod; REJECT when the Service has no ready
endpoint) and kube-router on the agent's node (the agent's NetworkPolicy; REJECT for what it
does not admit). Both answer "connection refused". Once in a clean-clone run every request to
an agent on one worker was refused for 20 minutes though the agent was Ready and the load
pod's address was in kube-router's ipsets there, while the same scenarios pass on other runs.
The first refusal to a Ready agent is therefore recorded with what each node's REJECT rules
counted, and kube-router and kube-proxy are restarted on the nodes the path crosses (each
rebuilds its ipsets and chains from the API server). A policy that truly refuses the load pod
still refuses it after the restart, and the scenario fails with both records; a restart that
helped is printed as a warning in the run's summary, never passed over in silence.
"""

from __future__ import annotations

import shutil
import subprocess
import time
import warnings
from datetime import UTC, datetime

from e2e import faults_testlib as lib
from e2e import kube
from e2e.test_scenario_conversation import AGENT_SELECTOR
from kubernetes import client

from . import nodes_testlib

READY_REFUSED_S = 60  # an agent Ready this long whose every recent request was refused
SLICE_S = 20  # how often the refusals are looked at while waiting
PATH_SELECTORS = ("k8s-app=kube-router", "k8s-app=kube-proxy")  # the DaemonSets on the path


def wait_answered(
    cluster: kube.Cluster, namespace: str, moment: float, timeout: float = 240
) -> lib.Records:
    """``faults_testlib.wait_answered``, with at most one restart of the path when a Ready agent
    refuses every request (module docstring); the timeout starts again after that restart."""
    deadline = time.monotonic() + timeout
    restarted: str | None = None
    while True:
        try:
            return lib.wait_answered(cluster, namespace, moment, timeout=SLICE_S)
        except AssertionError as exc:
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"{exc}\n{restarted or ''}\n{path_state(cluster, namespace)}"
                ) from exc
        if restarted is None and refused_while_ready(cluster, namespace, moment):
            restarted = restart_path(cluster, namespace)
            warnings.warn(restarted, stacklevel=2)
            deadline = time.monotonic() + timeout


def refused_while_ready(cluster: kube.Cluster, namespace: str, moment: float) -> bool:
    """An agent pod Ready for READY_REFUSED_S and the last requests since then all refused."""
    ready_since = _ready_since(cluster, namespace)
    if ready_since is None or time.time() - ready_since < READY_REFUSED_S:
        return False
    recent = [a for a in lib.records(cluster, namespace).attempts if a.started > moment]
    after_ready = [a for a in recent if a.started > ready_since][-5:]
    return len(after_ready) == 5 and all("ConnectionRefused" in a.error for a in after_ready)


def _ready_since(cluster: kube.Cluster, namespace: str) -> float | None:
    """When the earliest agent pod that is Ready now became Ready (epoch seconds)."""
    pods = cluster.core.list_namespaced_pod(namespace, label_selector=AGENT_SELECTOR).items
    times = [
        c.last_transition_time.timestamp()
        for p in pods
        for c in p.status.conditions or []
        if c.type == "Ready" and c.status == "True" and c.last_transition_time
    ]
    return min(times) if times else None


def path_nodes(cluster: kube.Cluster, namespace: str) -> list[str]:
    """The load pod's node and every agent pod's node."""
    load = cluster.core.read_namespaced_pod(lib.LOAD_POD, namespace)
    agents = cluster.core.list_namespaced_pod(namespace, label_selector=AGENT_SELECTOR).items
    found = {str(p.spec.node_name) for p in [load, *agents] if p.spec.node_name}
    return sorted(found)


def restart_path(cluster: kube.Cluster, namespace: str) -> str:
    """Record the path's state, delete kube-router's and kube-proxy's pods on the path's
    nodes, wait for their successors to run; what was done and what was seen before, as one
    text."""
    before = path_state(cluster, namespace)
    ready = {
        n.metadata.name
        for n in cluster.core.list_node().items
        if nodes_testlib.ready(n.status.conditions)
    }
    nodes = [node for node in path_nodes(cluster, namespace) if node in ready]
    for node in nodes:
        for pod in _path_pods(cluster, node):
            cluster.core.delete_namespaced_pod(pod.metadata.name, "kube-system")
    kube.wait_until(
        lambda: all(_path_running(cluster, node) for node in nodes),
        180,
        f"kube-router and kube-proxy running again on {nodes}",
    )
    stamp = datetime.now(UTC).isoformat(timespec="seconds")
    return (
        f"{stamp} {namespace}: a Ready agent refused every request for {READY_REFUSED_S} s; "
        f"kube-router and kube-proxy restarted on {nodes}. Before the restart:\n{before}"
    )


def _path_pods(cluster: kube.Cluster, node: str) -> list[client.V1Pod]:
    """kube-router's and kube-proxy's pods on ``node``."""
    return [
        pod
        for selector in PATH_SELECTORS
        for pod in cluster.core.list_namespaced_pod(
            "kube-system", label_selector=selector, field_selector=f"spec.nodeName={node}"
        ).items
    ]


def _path_running(cluster: kube.Cluster, node: str) -> bool:
    pods = _path_pods(cluster, node)
    return len(pods) == len(PATH_SELECTORS) and all(
        p.metadata.deletion_timestamp is None
        and p.status.phase == "Running"
        and all(s.ready for s in p.status.container_statuses or [])
        for p in pods
    )


def path_state(cluster: kube.Cluster, namespace: str) -> str:
    """The load pod's and agents' addresses, the Service's endpoints, and per node on the
    path: whether kube-router's ipsets hold the load pod, the REJECT rules that counted
    packets, and kube-router's and kube-proxy's last log lines."""
    load_ip = str(cluster.core.read_namespaced_pod(lib.LOAD_POD, namespace).status.pod_ip)
    agents = cluster.core.list_namespaced_pod(namespace, label_selector=AGENT_SELECTOR).items
    lines = [
        f"load pod address {load_ip}",
        *(f"agent pod {p.metadata.name} {p.status.pod_ip} on {p.spec.node_name}" for p in agents),
        f"endpoints: {_endpoints(cluster, namespace)}",
    ]
    for node in path_nodes(cluster, namespace):
        lines.append(f"{node}: {_ipsets_hold(node, load_ip)}")
        lines += [f"  counted: {rule}" for rule in _rejects_counted(node)]
        for pod in _path_pods(cluster, node):
            log = kube.pod_log(cluster, "kube-system", pod.metadata.name)
            lines += [f"  {pod.metadata.name}: {line}" for line in log.splitlines()[-20:]]
    return "\n".join(lines)


def _endpoints(cluster: kube.Cluster, namespace: str) -> str:
    slices = client.DiscoveryV1Api(cluster.api).list_namespaced_endpoint_slice(namespace).items
    return "; ".join(
        f"{s.metadata.name}: " + ",".join(_endpoint(e) for e in s.endpoints or []) for s in slices
    )


def _endpoint(endpoint: client.V1Endpoint) -> str:
    state = "ready" if endpoint.conditions and endpoint.conditions.ready else "not ready"
    return f"{'/'.join(endpoint.addresses)} ({state})"


def _node_command(node: str, *command: str) -> subprocess.CompletedProcess[str] | None:
    podman = shutil.which("podman")
    if podman is None:
        return None
    return subprocess.run(
        [podman, "exec", node, *command], capture_output=True, text=True, check=False
    )


def _ipsets_hold(node: str, address: str) -> str:
    done = _node_command(node, "ipset", "list")
    if done is None:
        return "no podman here: its ipsets not read"
    if done.returncode != 0:
        return f"`ipset list` failed: {done.stderr.strip()}"
    found = "in" if address in done.stdout.split() else "NOT in"
    return f"the load pod's address is {found} kube-router's ipsets"


def _rejects_counted(node: str) -> list[str]:
    """The node's REJECT rules whose packet counter is not zero (`iptables-save -c`)."""
    done = _node_command(node, "iptables-save", "-c")
    if done is None or done.returncode != 0:
        return ["`iptables-save -c` not read"]
    return [
        line
        for line in done.stdout.splitlines()
        if "-j REJECT" in line and not line.startswith("[0:")
    ]
