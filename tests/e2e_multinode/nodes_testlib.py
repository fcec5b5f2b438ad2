"""Helpers of the multi-node tier: nodes, cordons and drains, pods pinned where a scenario
needs them, the agent's load pod kept off the workers a scenario drains, and the proof, from
every agent pod's own log, that at most one gateway served the agent at any moment."""

from __future__ import annotations

import contextlib
import itertools
import json
import math
import subprocess
import threading
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

from e2e import faults_testlib as lib
from e2e import images, kube
from e2e.test_scenario_conversation import AGENT_SELECTOR
from kubernetes import client
from support.chat_load import Attempt

SHARED_CLASS = "shared-path"  # ci/kind/shared-path-storage.yaml: one filesystem on every node
LOCAL_CLASS = "local-path"  # the node image's default: a directory of one node
CONTROL_PLANE = "node-role.kubernetes.io/control-plane"
HOSTNAME = "kubernetes.io/hostname"
LEFTOVERS_TIMEOUT_S = 300


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


def away_from(pod: client.V1Pod, node: str) -> client.V1Pod:
    """``pod`` with a required node affinity that keeps it off ``node``.

    Said in the pod, not by cordoning the node: the scheduler reads a cordon from its own
    cache of nodes, so a pod created right after the cordon may still land on it."""
    pod.spec.affinity = client.V1Affinity(
        node_affinity=client.V1NodeAffinity(
            required_during_scheduling_ignored_during_execution=client.V1NodeSelector(
                node_selector_terms=[
                    client.V1NodeSelectorTerm(
                        match_expressions=[
                            client.V1NodeSelectorRequirement(
                                key="kubernetes.io/hostname", operator="NotIn", values=[node]
                            )
                        ]
                    )
                ]
            )
        )
    )
    return pod


@dataclass(frozen=True)
class Drain:
    returncode: int
    output: str
    seconds: float


def leftovers(cluster: kube.Cluster, node: str) -> list[str]:
    """What earlier scenarios still clean up and a drain of ``node`` would trip on: namespaces
    being deleted, volumes released by their claims, and running pods on the node that no
    controller owns, which `kubectl drain` refuses to evict. The provisioners' helper pods are
    such pods (each deletes one released volume's directory on its node): a scenario's
    namespace is deleted in the background, and its volumes are released a while later."""
    namespaces = cluster.core.list_namespace().items
    volumes = cluster.core.list_persistent_volume().items
    pods = cluster.core.list_pod_for_all_namespaces(field_selector=f"spec.nodeName={node}").items
    return (
        [f"namespace {n.metadata.name}" for n in namespaces if n.status.phase == "Terminating"]
        + [f"volume {v.metadata.name}" for v in volumes if v.status.phase == "Released"]
        + [
            f"pod {p.metadata.namespace}/{p.metadata.name}"
            for p in pods
            if not p.metadata.owner_references and p.status.phase in ("Pending", "Running")
        ]
    )


def drain(cluster: kube.Cluster, node: str, timeout_s: int) -> Drain:
    """`kubectl drain` as an operator runs it (daemonsets stay, emptyDirs go), once earlier
    scenarios' leftovers are gone (``leftovers``); the node stays cordoned, whatever the
    outcome, until the caller uncordons it."""
    deadline = time.monotonic() + LEFTOVERS_TIMEOUT_S
    while found := leftovers(cluster, node):
        assert time.monotonic() < deadline, f"before draining {node}, still there: {found}"
        time.sleep(2)
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


# The entrypoint's events (hermes_runtime/agent/datalock.py, supervisor.py) that bound a hold
# of the data volume's lock and the runs of the gateway inside it.
LOCK_ACQUIRED = "agent.lock.acquired"
LOCK_RELEASED = "agent.lock.released"
GATEWAY_START = "agent.gateway.start"
GATEWAY_ENDS = (
    "agent.gateway.stopped",
    "agent.gateway.exited",
    "agent.gateway.crashed",
    "agent.gateway.gave_up",
)
FOLLOW_POLL_S = 0.5


@dataclass(frozen=True)
class Hold:
    """One agent container's hold on the volume: the lock from acquired to released
    (``math.inf``: still held when the watch ended) and its gateway runs, each (start, end)."""

    pod: str
    node: str
    acquired: float
    released: float
    gateways: tuple[tuple[float, float], ...]


@dataclass
class _Follower:
    """The reads of one container instance's log: each read starts at its first line, so the
    longest file is the most complete."""

    pod: str
    instance: int
    node: str
    paths: list[Path]
    process: subprocess.Popen[bytes]

    def longest(self) -> Path:
        return max(self.paths, key=lambda p: p.stat().st_size)


@dataclass
class GatewayWatch:
    """Follows the agent container's log of every agent pod of ``namespace`` from the moment
    the container runs (`kubectl logs -f`, the whole log from its first line) into ``folder``.

    Why logs and not the API: a pod's log is gone with the pod, and the old pod of a hand-over
    is gone by the time a scenario checks, so its log is kept while it runs. A read cut while
    its container still runs is started again into a new file; a container that ran but whose
    log was never read is reported by ``holds``, never skipped.
    """

    cluster: kube.Cluster
    namespace: str
    folder: Path
    _followers: dict[tuple[str, int], _Follower] = field(default_factory=dict)
    _unread: set[tuple[str, int]] = field(default_factory=set)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> None:
        """Follow from now on: every agent container running now is read from its first line."""
        self.folder.mkdir(parents=True, exist_ok=True)
        self._poll()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop following (also when never started): the logs read so far stay in ``folder``."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)
        for follower in self._followers.values():
            if follower.process.poll() is None:
                follower.process.terminate()
                follower.process.wait(timeout=10)

    def _run(self) -> None:
        while not self._stop.wait(FOLLOW_POLL_S):
            with contextlib.suppress(client.ApiException, OSError):
                self._poll()

    def _poll(self) -> None:
        pods = self.cluster.core.list_namespaced_pod(
            self.namespace, label_selector=AGENT_SELECTOR
        ).items
        for pod in pods:
            for status in pod.status.container_statuses or []:
                if status.name == "agent" and (status.state.running or status.state.terminated):
                    key = (str(pod.metadata.name), int(status.restart_count))
                    self._follow(key, str(pod.spec.node_name), bool(status.state.running))

    def _follow(self, key: tuple[str, int], node: str, running: bool) -> None:
        """Start reading this container instance's log, or again if the read was cut while the
        container still runs. An instance first seen terminated after a restart cannot be read
        in full any more (only the previous one is kept), so it is noted as unread."""
        known = self._followers.get(key)
        if known is not None and (known.process.poll() is None or not running):
            return
        if known is None and not running and key[1] > 0:
            self._unread.add(key)
            return
        pod, instance = key
        path = self.folder / f"{pod}.{instance}.{len(known.paths) if known else 0}.log"
        with path.open("wb") as out:
            process = subprocess.Popen(
                [
                    kube.tool("kubectl"),
                    "--kubeconfig",
                    str(self.cluster.kubeconfig),
                    "--namespace",
                    self.namespace,
                    "logs",
                    "--follow",
                    pod,
                    "--container",
                    "agent",
                ],
                stdout=out,
                stderr=subprocess.DEVNULL,
            )
        paths = [*known.paths, path] if known else [path]
        self._followers[key] = _Follower(pod, instance, node, paths, process)

    def holds(self, lost: dict[str, float] | None = None) -> list[Hold]:
        """Every container instance's hold, in the order they took the lock. Fails when a
        container ran unread, or a finished one's log has no release (its gateway might have
        outlived what the log shows).

        ``lost``: nodes stopped at a known moment (a power cut: every process on them ended
        then, with no chance to log a release). A hold still open in the log of a container
        on such a node ends at that moment; the caller proves the node's containers never
        ran again after it."""
        assert not self._unread, f"agent containers ran, their logs never read: {self._unread}"
        found = []
        for follower in self._followers.values():
            if lost and follower.node in lost:
                found += [_cut(h, lost[follower.node]) for h in _holds_in_log(follower, False)]
                continue
            ended = follower.process.poll() is not None and not self._still_running(follower)
            found += _holds_in_log(follower, ended)
        return sorted(found, key=lambda h: h.acquired)

    def _still_running(self, follower: _Follower) -> bool:
        """Whether this very instance (same restart count) of the agent container runs."""
        try:
            pod = self.cluster.core.read_namespaced_pod(follower.pod, self.namespace)
        except client.ApiException:
            return False
        return any(
            s.name == "agent" and s.state.running and s.restart_count == follower.instance
            for s in pod.status.container_statuses or []
        )


def _events(path: Path) -> list[dict[str, object]]:
    records = []
    for line in path.read_text(errors="replace").splitlines():
        with contextlib.suppress(ValueError):
            record = json.loads(line)
            if isinstance(record, dict) and "event" in record and "ts" in record:
                records.append(record)
    return records


def _cut(hold: Hold, at: float) -> Hold:
    """``hold`` and its gateway runs ended at ``at`` at the latest (its node stopped then)."""
    runs = tuple((a, min(b, at)) for a, b in hold.gateways)
    return replace(hold, released=min(hold.released, at), gateways=runs)


def _holds_in_log(follower: _Follower, ended: bool) -> list[Hold]:
    """The holds one container's log shows: the lock's acquisition, each gateway run, the
    release. A gateway started without the lock held fails here."""
    acquired: float | None = None
    gateways: list[tuple[float, float]] = []
    started: float | None = None
    holds = []
    path = follower.longest()
    where = f"pod {follower.pod} on {follower.node} ({path})"
    for record in _events(path):
        event, at = record["event"], float(str(record["ts"]))
        if event == LOCK_ACQUIRED:
            acquired = at
        elif event == GATEWAY_START:
            assert acquired is not None, f"{where}: a gateway started at {at} without the lock"
            started = at
        elif event in GATEWAY_ENDS and started is not None:
            gateways.append((started, at))
            started = None
        elif event == LOCK_RELEASED:
            assert acquired is not None and started is None, (
                f"{where}: the lock released at {at} with a gateway running or never taken"
            )
            holds.append(Hold(follower.pod, follower.node, acquired, at, tuple(gateways)))
            acquired, gateways = None, []
    if acquired is not None:
        assert not ended, (
            f"{where}: the container ended and its log has no {LOCK_RELEASED}: "
            "cannot prove when its gateway stopped"
        )
        if started is not None:
            gateways.append((started, math.inf))
        holds.append(Hold(follower.pod, follower.node, acquired, math.inf, tuple(gateways)))
    return holds


def assert_one_gateway_at_a_time(
    watch: GatewayWatch,
    attempts: list[Attempt],
    start: float,
    lost: dict[str, float] | None = None,
) -> list[Hold]:
    """At most one gateway served the agent at any moment: no two holds of the lock overlap
    (every gateway run lies inside its container's hold, ``_holds_in_log``), and every
    answered attempt overlapped some gateway's run, so its answer came from the one gateway
    then running. Prints the holds relative to ``start``; returns them. ``lost``: as for
    ``GatewayWatch.holds``."""
    holds = watch.holds(lost)
    assert holds, f"no agent container logged {LOCK_ACQUIRED}"
    lines = [
        f"    hold {h.pod[-5:]} on {h.node}: lock {h.acquired - start:+.2f} .. "
        f"{h.released - start:+.2f}; gateway "
        + ", ".join(f"{a - start:+.2f} .. {b - start:+.2f}" for a, b in h.gateways)
        for h in holds
    ]
    print("one gateway at a time:\n" + "\n".join(lines), flush=True)
    for before, after in itertools.pairwise(holds):
        assert before.released <= after.acquired, (
            f"two gateways: {after.pod} on {after.node} took the lock at {after.acquired} "
            f"while {before.pod} on {before.node} held it until {before.released}\n"
            + "\n".join(lines)
        )
    runs = [run for h in holds for run in h.gateways]
    orphans = [
        a
        for a in attempts
        if a.ok and not any(b <= a.started + a.total_s and a.started <= e for b, e in runs)
    ]
    assert not orphans, f"answered while no gateway ran: {orphans[:5]}\n" + "\n".join(lines)
    return holds
