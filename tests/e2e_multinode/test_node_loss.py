"""A lost node: the agent's node container stopped (a power cut) under chat load, node-local
storage (`local-path`), continuous replication on; the operator's recovery; then the node back.

The agent backs up to the in-namespace S3 backend (tests/e2e/charts/s3-backend) and replicates
its databases there with Litestream (`backup.continuous`); the backends, the S3 server and the
load pod run on the control plane, so only the agent goes with its node. The agent pod
tolerates `node.kubernetes.io/unreachable` and `not-ready` for a short while
(`agent.tolerations`), so Kubernetes evicts it soon after the node stops answering instead of
after its default 300 s. Its successor cannot start anywhere: its volume is pinned to the lost
node. The operator's recovery (docs/backup.md, "Node loss") is four commands: scale the agent to
0, delete the lost pod for good, delete its claim, and `helm upgrade --reuse-values` with
`restore.fromSnapshot=latest` and `restore.fromReplicas=true`, which makes the claim again
(a new volume on a live node) and fills it in the restore init container from the snapshot and
the newer replicas.

Figures printed, never asserted: acknowledged turns lost (RPO: answered with HTTP 200 before
the stop, missing from LCM after the recovery) and seconds from the stop until the agent
answers again (RTO), split into its steps. Asserted: the databases pass integrity_check; no
acknowledged turn is lost but each client's newest before the stop (a tail: never one older
than a turn the new copy holds), and the new copy holds turns that only the replicas had; every
turn answered after the recovery is stored once. Then the node is started again (with its old
address, as a rebooted machine keeps its own; podman would give it a new one, which the other
nodes' kube-router learn only minutes later: routes_testlib): no container of the agent's
namespace runs on it again (its pod was deleted for good), so the old copy can neither answer
nor write to the replicas; the new copy still holds the same turns, and the agent pods' own
logs show at most one gateway serving at any moment (the old pod's hold ends at the stop).
"""

from __future__ import annotations

import json
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import pytest
from e2e import faults_testlib as lib
from e2e import images, kube
from e2e.test_faults import SETTLE, SYNC_GRACE, VALUES, serving_pod
from e2e.test_scenario_backup import S3_CHART, s3_values
from e2e.test_scenario_conversation import AGENT_SELECTOR, CHART, CI_VALUES, RELEASE
from kubernetes import client
from support.chat_load import Attempt, fault_figures

from . import nodes_testlib as nodes
from . import packetpath_testlib as packetpath
from .routes_testlib import wait_for_pod_routes
from .test_drain import backup_now

IMAGES = ["agent", "fake-llm", "git-server", "seaweedfs"]
# Seconds the agent pod stays bound to a node that stopped answering before Kubernetes evicts
# it (the DefaultTolerationSeconds admission plugin's default: 300).
TOLERATION_S = 10
TOLERATIONS = [
    {"key": f"node.kubernetes.io/{taint}", "operator": "Exists", "effect": "NoExecute"}
    | {"tolerationSeconds": TOLERATION_S}
    for taint in ("unreachable", "not-ready")
]
DEPLOYMENT = f"{RELEASE}-hermes-agent"  # the chart's full name
CLAIM = f"{DEPLOYMENT}-data"  # the agent's data volume
BACKENDS = ("fake-llm", "git-server", "s3")  # the agent's Deployments, kept off its node
LOAD_BEFORE_SNAPSHOT_S = 15
LOAD_AFTER_SNAPSHOT_S = 20  # turns that only the replicas hold
EVICTION_TIMEOUT_S = 240  # node-monitor-grace-period (50 s) + TOLERATION_S + the controller
NODE_BACK_TIMEOUT_S = 300
OLD_POD_WATCH_S = 30  # how long the returned node is watched for the old pod's containers
VOLUME_CLEANUP_TIMEOUT_S = 300


def pin_to_control_plane(cluster: kube.Cluster, namespace: str, deployment: str) -> None:
    """The Deployment's pods on the control plane (tolerating its taint), rolled out."""
    taint = {"key": nodes.CONTROL_PLANE, "operator": "Exists", "effect": "NoSchedule"}
    spec = {"nodeSelector": {nodes.CONTROL_PLANE: ""}, "tolerations": [taint]}
    body = {"spec": {"template": {"spec": spec}}}
    cluster.apps.patch_namespaced_deployment(deployment, namespace, body)
    kube.kubectl(
        cluster, namespace, "rollout", "status", f"deployment/{deployment}", "--timeout=180s"
    )


def install(
    cluster: kube.Cluster,
    namespace: str,
    helm: kube.Helm,
    tmp_path: Path,
    gateways: nodes.GatewayWatch,
) -> client.V1Pod:
    """Backends and S3 on the control plane, the agent (S3 target, continuous replication,
    short tolerations, `local-path`), the load answered, the logs followed; the agent pod."""
    images.require(IMAGES)
    lib.install_backends(helm)
    helm.install("s3", S3_CHART, set_values={"image": images.ref("seaweedfs")}, timeout="3m")
    for deployment in BACKENDS:
        pin_to_control_plane(cluster, namespace, deployment)
    extra: dict[str, Any] = {
        **VALUES,
        "agent": {**cast(dict[str, Any], VALUES["agent"]), "tolerations": TOLERATIONS},
        "persistence": {"storageClass": nodes.LOCAL_CLASS},
        "backup": {"continuous": {"enabled": True}},
    }
    values = tmp_path / "node-loss.yaml"
    values.write_text(json.dumps(extra))
    helm.install(RELEASE, CHART, values=[CI_VALUES, s3_values(tmp_path), values], timeout="5m")
    nodes.start_load_off_workers(cluster, namespace)
    packetpath.wait_answered(cluster, namespace, 0.0)
    gateways.start()
    agent = serving_pod(cluster, namespace)
    print(f"\nagent on {agent.spec.node_name}; backends, S3 and load on the control plane")
    return agent


def podman(*args: str) -> str:
    """A podman command on the kind node containers; fails naming the command."""
    binary = shutil.which("podman")
    assert binary, "a node loss needs podman (the kind provider) on PATH"
    return kube.run_checked([binary, *args], f"podman {' '.join(args)}", timeout=120)


def node_ready(cluster: kube.Cluster, node: str) -> bool:
    return nodes.ready(cluster.core.read_node(node).status.conditions)


def node_not_ready_since(cluster: kube.Cluster, node: str) -> float | None:
    """When the node's Ready condition last turned False or Unknown; None while Ready."""
    for condition in cluster.core.read_node(node).status.conditions or []:
        if condition.type == "Ready" and condition.status != "True":
            return float(condition.last_transition_time.timestamp())
    return None


def evicted(cluster: kube.Cluster, namespace: str, name: str) -> float | None:
    """When the lost pod was marked for deletion (the taint eviction); None before."""
    pod = cluster.core.read_namespaced_pod(name, namespace)
    stamp = pod.metadata.deletion_timestamp
    if stamp is None:
        return None
    return float(stamp.timestamp()) - float(pod.metadata.deletion_grace_period_seconds or 0)


@dataclass(frozen=True)
class Recovery:
    """Moments (epoch seconds) of the recovery's steps and the old volume's name."""

    not_ready: float
    evicted: float
    commands_done: float
    old_volume: str


def recover(cluster: kube.Cluster, namespace: str, helm: kube.Helm, lost: client.V1Pod) -> Recovery:
    """Wait for the eviction, then the operator's commands (docs/backup.md, "Node loss"); the
    upgrade's `replicas: 1` scales the agent up again."""
    name, node = str(lost.metadata.name), str(lost.spec.node_name)
    old_volume = str(
        cluster.core.read_namespaced_persistent_volume_claim(CLAIM, namespace).spec.volume_name
    )
    kube.wait_until(
        lambda: evicted(cluster, namespace, name) is not None,
        EVICTION_TIMEOUT_S,
        f"the agent pod {name} evicted from the lost node {node}",
    )
    not_ready = node_not_ready_since(cluster, node)
    assert not_ready is not None, f"{node} is Ready again"
    was_evicted = evicted(cluster, namespace, name) or 0.0
    # Scaled to 0 first: a replacement from the old template (no restore init container) could
    # otherwise take the new, empty volume before the upgrade's pod and start an empty agent.
    kube.kubectl(cluster, namespace, "scale", f"deployment/{DEPLOYMENT}", "--replicas=0")
    kube.kubectl(
        cluster, namespace, "delete", "pod", "-l", AGENT_SELECTOR, "--force", "--grace-period=0"
    )
    kube.kubectl(cluster, namespace, "delete", "pvc", CLAIM, "--timeout=120s")
    helm.run(
        *("upgrade", RELEASE, str(CHART), "--reuse-values"),
        *("--set", "restore.fromSnapshot=latest", "--set", "restore.fromReplicas=true"),
        *("--wait", "--timeout", "5m"),
    )
    return Recovery(not_ready, was_evicted, time.time(), old_volume)


def restored_from(cluster: kube.Cluster, namespace: str, pod: str) -> dict[str, str]:
    """Which copy (snapshot or litestream) each database of the new volume came from."""
    log = kube.kubectl(cluster, namespace, "logs", pod, "-c", "restore")
    events = [json.loads(line) for line in log.splitlines() if line.startswith("{")]
    chosen = {e["path"]: e["source"] for e in events if e["event"] == "backup.restore.database"}
    assert "lcm.db" in chosen, f"the restore init container restored no lcm.db:\n{log}"
    return chosen


def answered_at(attempt: Attempt) -> float:
    return attempt.started + attempt.total_s


def lost_turns(
    found: lib.Records,
    check: lib.DataCheck,
    stop: float,
    snapped: float,
    sources: dict[str, str],
    log: str,
) -> list[Attempt]:
    """Acknowledged turns missing from (or doubled in) the new copy, each checked to be in its
    client's tail: Litestream ships the WAL in commit order, so a power cut loses the newest
    turns (a turn reaches LCM with the client's next one; the last upload is up to a second
    old, more on a loaded node) and never one older than a turn the copy holds. How many were
    lost is the RPO, printed, not asserted. The copy must also hold a turn answered after the
    snapshot (``snapped``): one only the replicas had. Failures name where each database came
    from and end with the lost pod's replication log."""
    answered = {a.marker: a for a in found.attempts if a.ok}
    hit_markers = {*check.missing, *check.twice}
    tail: set[str] = set()
    for name in {a.client for a in answered.values()}:
        before = sorted(
            (a for a in answered.values() if a.client == name and answered_at(a) <= stop),
            key=answered_at,
        )
        kept = [i for i, a in enumerate(before) if a.marker not in hit_markers]
        tail |= {a.marker for a in before[(kept[-1] + 1 if kept else 0) :]}
    hit = [answered[m] for m in sorted(hit_markers)]
    older = [a for a in hit if a.marker not in tail]
    context = (
        f"missing {check.missing}, twice {check.twice}; restored from {sources}; "
        "the lost pod's replication log until the stop:\n" + "\n".join(log.splitlines()[-80:])
    )
    assert not older, f"acknowledged turns lost or doubled before a turn kept: {older}; {context}"
    replicated = [
        a
        for a in answered.values()
        if a.started > snapped and answered_at(a) <= stop and a.marker not in hit_markers
    ]
    assert replicated, f"no turn answered after the snapshot is in the new copy; {context}"
    return hit


def first_answer_after(found: lib.Records, moment: float) -> float:
    return min(answered_at(a) for a in found.attempts if a.ok and a.started > moment)


def print_figures(
    found: lib.Records, stop: float, gone: float, end: float, steps: Recovery, lost: list[Attempt]
) -> None:
    """RPO (acknowledged turns lost) and RTO (the stop's start to the first answer after it),
    with the RTO's steps; ``gone``: when the stop returned."""
    rto = first_answer_after(found, gone) - stop
    figures = fault_figures(found.attempts, found.health, stop, end)
    before = sum(1 for a in found.attempts if a.ok and answered_at(a) <= gone)
    oldest = min((answered_at(a) for a in lost), default=None)
    age = "" if oldest is None else f" (acknowledged in the last {gone - oldest:.1f} s before it)"
    print(
        f"node loss, local-path, backup.continuous, tolerationSeconds {TOLERATION_S}: "
        f"the stop took {gone - stop:.1f} s; "
        f"RPO {len(lost)} of {before} turns acknowledged before the stop lost "
        f"{[a.marker for a in lost]}{age}; "
        f"RTO {rto:.1f} s (node NotReady +{steps.not_ready - stop:.1f} s, pod evicted "
        f"+{steps.evicted - stop:.1f} s, recovery commands done "
        f"+{steps.commands_done - stop:.1f} s); failed requests {figures.failed_requests} "
        f"({figures.turns_hit} turns)",
        flush=True,
    )


def running_on_node(node: str, namespace: str) -> list[str]:
    """The names of the namespace's containers the node's runtime runs (crictl)."""
    out = podman(
        *("exec", node, "crictl", "ps", "-o", "json"),
        f"--label=io.kubernetes.pod.namespace={namespace}",
    )
    return [str(c["metadata"]["name"]) for c in json.loads(out).get("containers", [])]


@dataclass(frozen=True)
class Address:
    """A node container's network and its address there."""

    network: str
    ip: str


def address_of(node: str) -> Address:
    fields = "{{range $name, $net := .NetworkSettings.Networks}}{{$name}} {{$net.IPAddress}}{{end}}"
    network, ip = podman("inspect", "--format", fields, node).split()
    return Address(network, ip)


def start_node(node: str, address: Address) -> None:
    """Start the stopped node container with its old address."""
    podman("network", "disconnect", address.network, node)
    podman("network", "connect", "--ip", address.ip, address.network, node)
    podman("start", node)


def watch_returned_node(
    cluster: kube.Cluster, node: str, address: Address, namespace: str
) -> float:
    """Start the node again, wait until Ready, then watch it: none of the namespace's
    containers runs there. When it was Ready."""
    start_node(node, address)
    kube.wait_until(lambda: node_ready(cluster, node), NODE_BACK_TIMEOUT_S, f"{node} Ready again")
    back = time.time()
    deadline = time.monotonic() + OLD_POD_WATCH_S
    while time.monotonic() < deadline:
        found = running_on_node(node, namespace)
        assert not found, f"containers of {namespace} run again on the returned {node}: {found}"
        time.sleep(2)
    return back


def wait_volume_gone(cluster: kube.Cluster, volume: str) -> None:
    """The lost node's old volume deleted by its provisioner (it needs the node back), so a
    later scenario's drain finds no released volume there."""

    def gone() -> bool:
        try:
            cluster.core.read_persistent_volume(volume)
        except client.ApiException as exc:
            if exc.status == 404:
                return True
            raise
        return False

    kube.wait_until(gone, VOLUME_CLEANUP_TIMEOUT_S, f"the lost node's old volume {volume} deleted")


def restart_if_stopped(cluster: kube.Cluster, node: str, address: Address) -> float:
    """The node container running and Ready, uncordoned, and the pod routes between the nodes
    complete, for later scenarios (also after a failure); the seconds waited for the routes."""
    state = podman("inspect", "--format", "{{.State.Running}}", node).strip()
    if state != "true":
        start_node(node, address)
    kube.wait_until(lambda: node_ready(cluster, node), NODE_BACK_TIMEOUT_S, f"{node} Ready again")
    nodes.cordon(cluster, node, False)
    return wait_for_pod_routes(cluster)


@pytest.mark.timeout(1500)
def test_node_loss_restores_the_agent_on_another_node_from_its_replicas(
    cluster: kube.Cluster,
    namespace: str,
    helm: kube.Helm,
    tmp_path: Path,
    gateways: nodes.GatewayWatch,
) -> None:
    lost = install(cluster, namespace, helm, tmp_path, gateways)
    node = str(lost.spec.node_name)
    time.sleep(LOAD_BEFORE_SNAPSHOT_S)
    ran, snapshot = backup_now(cluster, namespace)
    snapped = time.time()  # turns started after this are in no snapshot
    assert ran == node, f"the backup ran on {ran}, the agent on {node}"
    time.sleep(LOAD_AFTER_SNAPSHOT_S)
    replication = kube.kubectl(
        cluster, namespace, "logs", str(lost.metadata.name), "-c", "replicate"
    )
    (tmp_path / "replicate-before-the-stop.log").write_text(replication)
    address = address_of(node)
    stop = time.time()
    try:
        podman("stop", "--time", "0", node)  # a power cut: no process gets a signal
        gone = time.time()  # every process of the node ended by now (turns answered until then)
        steps = recover(cluster, namespace, helm, lost)
        found = packetpath.wait_answered(cluster, namespace, steps.commands_done)
        new = serving_pod(cluster, namespace)
        assert new.spec.node_name != node, f"the new agent pod runs on the lost node {node}"
        sources = restored_from(cluster, namespace, str(new.metadata.name))
        time.sleep(SETTLE)
        end = time.time()
        found = lib.records(cluster, namespace)
        check = lib.check_data(
            cluster, namespace, found, end - SYNC_GRACE, tolerate_lost_or_twice=True
        )
        lost_now = lost_turns(found, check, gone, snapped, sources, replication)
        back = watch_returned_node(cluster, node, address, namespace)
    finally:
        routes = restart_if_stopped(cluster, node, address)
    again = lib.check_data(
        cluster,
        namespace,
        lib.records(cluster, namespace),
        time.time() - SYNC_GRACE,
        tolerate_lost_or_twice=True,
    )
    assert (again.missing, again.twice) == (check.missing, check.twice), (
        f"the new copy changed once {node} was back: missing {check.missing} -> "
        f"{again.missing}, twice {check.twice} -> {again.twice}"
    )
    nodes.assert_one_gateway_at_a_time(gateways, found.attempts, stop, lost={node: gone})
    print_figures(found, stop, gone, end, steps, lost_now)
    print(
        f"  snapshot {snapshot[:8]}; restored {sources}; {node} -> {new.spec.node_name}; "
        f"{node} Ready again +{back - stop:.1f} s, then none of {namespace}'s containers ran "
        f"there for {OLD_POD_WATCH_S} s; pod routes complete {routes:.0f} s later",
        flush=True,
    )
    wait_volume_gone(cluster, steps.old_volume)
