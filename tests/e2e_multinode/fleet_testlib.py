"""Helpers of the fleet scenario: many releases of the chart side by side, a client pod per
namespace that talks to them, and the cost of each agent pod read from its containers' cgroups.

Why the cost is read from the containers' cgroups (exec `cat` in each container): that is what
the kernel charges the pod for, sidecars included, on any runtime; `kubectl top` needs a
metrics server the test cluster does not run.
"""

from __future__ import annotations

import base64
import concurrent.futures
import json
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, TypeVar

from e2e import faults_testlib as lib
from e2e import images, kube
from e2e.test_faults import VALUES

from . import nodes_testlib as nodes

API_PORT = 8642  # the chart's apiServer.port
METRICS_PORTS = (9090, 9091)  # metrics.port, metrics.lcmPort
LLM_PORT = 8080  # the fake LLM's Service port (ci.yaml's llm.baseUrl)
CLIENT_POD = "fleet-client"
MARKER_PREFIX = "fleet-marker-"
ROLLOUT_ANNOTATION = "hermes-runtime.dev/fleet-rollout"
# Small requests so ten agents fit on two workers of a small machine; the limit leaves room.
SMALL_RESOURCES = {"requests": {"cpu": "10m", "memory": "96Mi"}, "limits": {"memory": "1Gi"}}

T = TypeVar("T")


@dataclass(frozen=True)
class Agent:
    """One release of the fleet, and its serving pod once installed."""

    namespace: str
    release: str
    node: str
    pod: str = ""
    pod_ip: str = ""
    uid: str = ""
    service_account: str = ""

    @property
    def fullname(self) -> str:
        return f"{self.release}-hermes-agent"

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.release}"

    @property
    def marker(self) -> str:
        return f"{MARKER_PREFIX}{self.namespace}-{self.release}"


def parallel(items: Iterable[T], work: Callable[[T], Any], workers: int = 10) -> list[Any]:
    """``work`` on every item in threads; results in order; the first error raised."""
    with concurrent.futures.ThreadPoolExecutor(max_workers=workers) as pool:
        return list(pool.map(work, items))


def release_values(node: str, rollout: str = "") -> dict[str, Any]:
    """The fault suite's values (registry images, no embeddings, no `helm test`), small
    requests, the agent pinned to ``node``; ``rollout`` set: a pod annotation that changes the
    pod template (what an upgrade of the fleet changes)."""
    base: dict[str, Any] = dict(VALUES)
    agent: dict[str, Any] = {
        **base["agent"],
        "resources": SMALL_RESOURCES,
        "nodeSelector": {nodes.HOSTNAME: node},
    }
    if rollout:
        agent["podAnnotations"] = {ROLLOUT_ANNOTATION: rollout}
    return {**base, "agent": agent}


def selector(release: str) -> str:
    return f"app.kubernetes.io/instance={release},app.kubernetes.io/component=agent"


def serving(cluster: kube.Cluster, agent: Agent) -> Agent | None:
    """The agent with its one live, Ready pod filled in; None while there is not exactly one."""
    pods = cluster.core.list_namespaced_pod(agent.namespace, label_selector=selector(agent.release))
    live = [p for p in pods.items if p.metadata.deletion_timestamp is None]
    ready = [
        p
        for p in live
        if any(c.type == "Ready" and c.status == "True" for c in p.status.conditions or [])
    ]
    if len(live) != 1 or len(ready) != 1:
        return None
    pod = ready[0]
    return Agent(
        agent.namespace,
        agent.release,
        str(pod.spec.node_name),
        str(pod.metadata.name),
        str(pod.status.pod_ip),
        str(pod.metadata.uid),
        str(pod.spec.service_account_name),
    )


def wait_serving(
    cluster: kube.Cluster, agent: Agent, old_uid: str = "", timeout: float = 480
) -> Agent:
    """The agent's one Ready pod (not the pod ``old_uid``), waited for."""
    found: list[Agent] = []

    def ready() -> bool:
        now = serving(cluster, agent)
        if now is None or now.uid == old_uid:
            return False
        found.append(now)
        return True

    kube.wait_until(ready, timeout, f"one Ready agent pod of {agent.key}", interval=2)
    return found[-1]


def release_secret_value(cluster: kube.Cluster, agent: Agent, key: str) -> str:
    """``key`` of the release's one Secret holding it (the API key a client of that agent is
    given, the restic password), decoded."""
    what = f"Secret of {agent.key} with {key}"
    name = lib.release_secret_with(cluster, agent.namespace, key, what, agent.release)
    secret = cluster.core.read_namespaced_secret(name, agent.namespace)
    return base64.b64decode(secret.data[key]).decode()


def start_client(cluster: kube.Cluster, namespace: str) -> None:
    """A client pod in ``namespace`` (the agent image for its python3; on the control plane,
    off the workers the agents share): the chart's default policy lets any pod of the
    release's namespace call the API port."""
    pod = kube.restricted_pod(CLIENT_POD, images.ref("agent"), ["sleep", "3600"], user=10000)
    pod.metadata.name = CLIENT_POD
    cluster.core.create_namespaced_pod(namespace, nodes.on_control_plane(pod))


def wait_client(cluster: kube.Cluster, namespace: str) -> None:
    kube.wait_until(
        lambda: cluster.core.read_namespaced_pod(CLIENT_POD, namespace).status.phase == "Running",
        180,
        f"client pod {namespace}/{CLIENT_POD} running",
    )


# Runs in the client pod: one chat turn to each agent of its namespace at once, each retried
# (a new Service reaches DNS and kube-proxy a moment after its pod turns Ready; a rolled-over
# agent's Service moves to the new pod) until answered or the deadline. Keys arrive on stdin.
CHAT = """
import json, sys, threading, time, urllib.error, urllib.request
spec = json.load(sys.stdin)
out = {}
def turn(agent):
    began = time.monotonic()
    deadline = began + spec["deadline_s"]
    body = {"model": "hermes-agent", "messages": [{"role": "user", "content": agent["text"]}]}
    errors = []
    while time.monotonic() < deadline:
        request = urllib.request.Request(
            agent["url"] + "/v1/chat/completions",
            data=json.dumps(body).encode(),
            headers={
                "Authorization": "Bearer " + agent["key"],
                "Content-Type": "application/json",
                "X-Hermes-Session-Id": agent["session"],
                "Idempotency-Key": agent["text"],
            },
        )
        try:
            with urllib.request.urlopen(request, timeout=120) as response:
                reply = json.loads(response.read())["choices"][0]["message"]["content"]
            out[agent["name"]] = {"ok": True, "seconds": time.monotonic() - began,
                                  "reply": reply[:200], "errors": errors[-3:]}
            return
        except urllib.error.HTTPError as error:
            errors.append(f"HTTP {error.code}: {error.read()[:300]!r}")
        except OSError as error:
            errors.append(f"{type(error).__name__}: {error}")
        time.sleep(1)
    out[agent["name"]] = {"ok": False, "seconds": time.monotonic() - began, "errors": errors[-5:]}
threads = [threading.Thread(target=turn, args=(a,)) for a in spec["agents"]]
for t in threads:
    t.start()
for t in threads:
    t.join()
print(json.dumps(out))
"""


def chat_all(
    cluster: kube.Cluster, agents: list[Agent], text: str, deadline_s: float = 240
) -> dict[str, dict[str, Any]]:
    """One turn to every agent from its namespace's client pod; per agent key: ok, seconds,
    reply, errors."""
    by_namespace: dict[str, list[Agent]] = {}
    for agent in agents:
        by_namespace.setdefault(agent.namespace, []).append(agent)

    def one_namespace(namespace: str) -> dict[str, Any]:
        spec = {
            "deadline_s": deadline_s,
            "agents": [
                {
                    "name": a.key,
                    "url": f"http://{a.fullname}:{API_PORT}",
                    "key": release_secret_value(cluster, a, "api-key"),
                    "session": f"fleet-{a.release}",
                    "text": f"{text} {a.key} {time.time():.3f}",
                }
                for a in by_namespace[namespace]
            ],
        }
        done = kube.exec_in_container(
            cluster,
            namespace,
            CLIENT_POD,
            "main",
            ["python3", "-c", CHAT],
            json.dumps(spec),
            timeout=deadline_s + 120,
        )
        assert done.returncode == 0, (
            f"chat from {namespace} failed: {done.stdout[-2000:]} {done.stderr[-2000:]}"
        )
        result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
        return result

    merged: dict[str, dict[str, Any]] = {}
    for result in parallel(list(by_namespace), one_namespace):
        merged.update(result)
    return merged


# Printed per container: its cgroup's memory, inactive file pages and CPU time (µs), from the
# container's own cgroup (v2: memory.current, cpu.stat; v1: memory.usage_in_bytes, cpuacct).
CGROUP = r"""
value() { while read -r k v; do [ "$k" = "$2" ] && echo "$v" && return; done < "$1"; echo 0; }
if [ -f /sys/fs/cgroup/memory.current ]; then
  echo "usage $(cat /sys/fs/cgroup/memory.current)"
  echo "inactive_file $(value /sys/fs/cgroup/memory.stat inactive_file)"
  echo "cpu_usec $(value /sys/fs/cgroup/cpu.stat usage_usec)"
else
  echo "usage $(cat /sys/fs/cgroup/memory/memory.usage_in_bytes)"
  echo "inactive_file $(value /sys/fs/cgroup/memory/memory.stat total_inactive_file)"
  echo "cpu_usec $(( $(cat /sys/fs/cgroup/cpuacct/cpuacct.usage) / 1000 ))"
fi
"""


@dataclass(frozen=True)
class Usage:
    """A pod's containers summed: memory charged to their cgroups, the working set (that minus
    inactive file pages, as the kubelet counts it), CPU time; and when it was read."""

    containers: int
    usage_bytes: int
    working_set_bytes: int
    cpu_usec: int
    at: float


def usage(cluster: kube.Cluster, agent: Agent) -> Usage:
    pod = cluster.core.read_namespaced_pod(agent.pod, agent.namespace)
    names = [c.name for c in pod.spec.containers]
    names += [c.name for c in pod.spec.init_containers or [] if c.restart_policy == "Always"]
    total = {"usage": 0, "inactive_file": 0, "cpu_usec": 0}
    at = time.time()
    for name in names:
        text = kube.read_in_container(
            cluster, agent.namespace, agent.pod, name, ["sh", "-c", CGROUP]
        )
        values = dict(line.split() for line in text.strip().splitlines())
        for key in total:
            total[key] += int(values[key])
    working = total["usage"] - total["inactive_file"]
    return Usage(len(names), total["usage"], working, total["cpu_usec"], at)
