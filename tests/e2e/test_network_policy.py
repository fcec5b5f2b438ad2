"""The chart's default NetworkPolicies on a CNI that enforces them (kube-router in the kind node).

Installed with values-examples/ci.yaml alone (the policy is on by default), the release works (a
conversation through the fake LLM from a pod of its namespace, `helm test`, a backup job), and:

- from inside the agent container, the API server (kubernetes.default.svc:443 and its endpoint
  address), a pod of another namespace (by address and by Service name) and the metadata address
  169.254.169.254 do not answer, while the fake LLM does (so DNS and the probe itself work);
- a pod of another namespace cannot open the agent's API or metrics port.

Every "blocked" has a control that shows the target answers without the policy: a pod of the
other namespace (no policy selects it) reaches the API server and the target pod, and the agent
reaches its own endpoint, so a refusal is the policy and not a server that is down. On kind
nothing listens at 169.254.169.254, so that check only shows the address stays silent; the chart
tests (tests/chart/test_chart_network.py) show no rule admits it.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client

from . import images, kube
from .test_scenario_conversation import api_key

CHART = kube.REPO_ROOT / "charts" / "hermes-agent"
CI_VALUES = images.ci_values()  # values-examples/ci.yaml, pulling from the registry
BACKENDS_CHART = Path(__file__).parent / "charts" / "ci-backends"
RELEASE = "hermes"
FULLNAME = f"{RELEASE}-hermes-agent"
AGENT_SELECTOR = f"app.kubernetes.io/instance={RELEASE},app.kubernetes.io/component=agent"
TARGET = "np-target"  # the listener in the other namespace
# Tries each target a few times: a new pod may be refused for a moment until the CNI has
# programmed its rules, so only a refusal that lasts counts as blocked. Prints one JSON object:
# name -> "open", "unresolved: ..." or "blocked: <last error>".
CONNECT = """
import json, socket, sys, time
verdicts = {}
for name, (host, port) in json.loads(sys.argv[1]).items():
    verdict = None
    for attempt in range(5):
        try:
            address = socket.getaddrinfo(host, port, socket.AF_INET, socket.SOCK_STREAM)[0][4]
        except OSError as error:
            verdict = f"unresolved: {error}"
            time.sleep(1)
            continue
        try:
            socket.create_connection(address, timeout=4).close()
            verdict = "open"
            break
        except OSError as error:
            verdict = f"blocked: {address[0]}:{address[1]} {error!r}"
            time.sleep(1)
    verdicts[name] = verdict
print(json.dumps(verdicts))
"""
# The conversation: a chat completion POSTed to the agent's Service from a pod of its namespace.
PROBE = (
    'n=0; while [ "$n" -lt 10 ]; do '
    'if timeout 8 wget -q -O /tmp/body --header "Authorization: Bearer $KEY" '
    '--header "Content-Type: application/json" --post-data "$BODY" "$URL"; '
    "then echo REACHED; cat /tmp/body; exit 0; fi; n=$((n + 1)); sleep 1; done; echo BLOCKED"
)


@pytest.fixture
def other_namespace(cluster: kube.Cluster) -> Iterator[str]:
    """A second namespace, with no policy of its own."""
    name = kube.create_restricted_namespace(cluster, "e2e-np-other")
    yield name
    kube.delete_namespace(cluster, name)


def start_target(cluster: kube.Cluster, namespace: str) -> str:
    """An HTTP listener (busybox httpd) and its Service in `namespace`; its pod address."""
    pod = kube.restricted_pod(
        TARGET,
        images.ref("busybox"),
        ["sh", "-c", "echo target > /www/index.html && exec httpd -f -p 8080 -h /www"],
    )
    pod.metadata.labels = {"app": TARGET}
    container = pod.spec.containers[0]
    container.ports = [client.V1ContainerPort(container_port=8080, name="http")]
    container.readiness_probe = client.V1Probe(
        tcp_socket=client.V1TCPSocketAction(port="http"), period_seconds=1
    )
    container.volume_mounts = [client.V1VolumeMount(name="www", mount_path="/www")]
    pod.spec.volumes = [client.V1Volume(name="www", empty_dir=client.V1EmptyDirVolumeSource())]
    pod.spec.restart_policy = "Always"
    cluster.core.create_namespaced_pod(namespace, pod)
    service = client.V1Service(
        metadata=client.V1ObjectMeta(name=TARGET),
        spec=client.V1ServiceSpec(
            selector={"app": TARGET}, ports=[client.V1ServicePort(port=8080, target_port=8080)]
        ),
    )
    cluster.core.create_namespaced_service(namespace, service)

    def ready() -> bool:
        status = cluster.core.read_namespaced_pod(TARGET, namespace).status
        return any(c.type == "Ready" and c.status == "True" for c in status.conditions or [])

    kube.wait_until(ready, 180, f"pod {namespace}/{TARGET} Ready")
    return str(cluster.core.read_namespaced_pod(TARGET, namespace).status.pod_ip)


def api_server_endpoint(cluster: kube.Cluster) -> tuple[str, int]:
    """The address kube-proxy translates kubernetes.default.svc:443 to (the policy sees it)."""
    slices = client.DiscoveryV1Api(cluster.api).list_namespaced_endpoint_slice(
        "default", label_selector="kubernetes.io/service-name=kubernetes"
    )
    endpoint_slice = slices.items[0]
    return str(endpoint_slice.endpoints[0].addresses[0]), int(endpoint_slice.ports[0].port)


def connect_from_pod(cluster: kube.Cluster, namespace: str, targets: dict) -> dict[str, str]:
    """CONNECT run in a fresh pod of `namespace` (the agent image: it has python3)."""
    pod = kube.restricted_pod(
        kube.unique_name("np-control"),
        images.ref("agent"),
        ["python3", "-c", CONNECT, json.dumps(targets)],
        user=10001,
    )
    result = kube.run_pod(cluster, namespace, pod, timeout=300)
    assert result.phase == "Succeeded", result.logs
    return dict(json.loads(result.logs.strip().splitlines()[-1]))


def connect_from_agent(cluster: kube.Cluster, namespace: str, targets: dict) -> dict[str, str]:
    """CONNECT run inside the agent container itself, where the model's commands run."""
    (pod,) = cluster.core.list_namespaced_pod(namespace, label_selector=AGENT_SELECTOR).items
    done = kube.exec_in_container(
        cluster,
        namespace,
        pod.metadata.name,
        "agent",
        ["python3", "-c", CONNECT, json.dumps(targets)],
        timeout=300,
        repeatable=True,
    )
    assert done.returncode == 0, done.stderr
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def converse(cluster: kube.Cluster, namespace: str, key: str) -> str:
    """POST a chat completion to the agent's Service from a fresh pod of its namespace."""
    pod = kube.restricted_pod(
        kube.unique_name("np-client"), images.ref("busybox"), ["sh", "-c", PROBE]
    )
    body = {"model": "hermes-agent", "messages": [{"role": "user", "content": "ping policy"}]}
    pod.spec.containers[0].env = [
        client.V1EnvVar(name="URL", value=f"http://{FULLNAME}:8642/v1/chat/completions"),
        client.V1EnvVar(name="KEY", value=key),
        client.V1EnvVar(name="BODY", value=json.dumps(body)),
    ]
    pod.spec.containers[0].volume_mounts = [client.V1VolumeMount(name="tmp", mount_path="/tmp")]
    pod.spec.volumes = [client.V1Volume(name="tmp", empty_dir=client.V1EmptyDirVolumeSource())]
    result = kube.run_pod(cluster, namespace, pod, timeout=180)
    assert result.phase == "Succeeded", result.logs
    return result.logs


def blocked(verdicts: dict[str, str], *names: str) -> list[str]:
    """The names among `names` whose verdict is not "blocked" (resolved, never connected)."""
    return [n for n in names if not verdicts[n].startswith("blocked")]


@pytest.mark.timeout(900)
def test_default_policy_confines_the_agent_and_the_release_still_works(
    cluster: kube.Cluster, namespace: str, helm: kube.Helm, other_namespace: str
) -> None:
    images.require(["agent", "fake-llm", "git-server", "busybox"])
    helm.install("backends", BACKENDS_CHART, timeout="3m")
    helm.install(RELEASE, CHART, values=[CI_VALUES], timeout="5m")
    policies = client.NetworkingV1Api(cluster.api).list_namespaced_network_policy(namespace)
    names = {p.metadata.name for p in policies.items}
    expected = {FULLNAME, f"{FULLNAME}-backup", f"{FULLNAME}-test", f"{FULLNAME}-secrets"}
    assert names == expected, names

    target_ip = start_target(cluster, other_namespace)
    api_ip, api_port = api_server_endpoint(cluster)
    # ci.yaml's kubeApi.discover: the secrets Job's policy names the API server's own address
    # and port, looked up at install, and nothing else (the hook ran through it: installed).
    (secrets_policy,) = [p for p in policies.items if p.metadata.name == f"{FULLNAME}-secrets"]
    (rule,) = secrets_policy.spec.egress
    assert [peer.ip_block.cidr for peer in rule.to] == [f"{api_ip}/32"], rule.to
    assert [port.port for port in rule.ports] == [api_port], rule.ports
    (agent,) = cluster.core.list_namespaced_pod(namespace, label_selector=AGENT_SELECTOR).items
    agent_ip = agent.status.pod_ip
    target_svc = f"{TARGET}.{other_namespace}.svc.cluster.local"
    agent_svc = f"{FULLNAME}.{namespace}.svc.cluster.local"
    metrics_svc = f"{FULLNAME}-metrics.{namespace}.svc.cluster.local"

    # From the other namespace: the API server and the target answer (the controls), the
    # agent's API and metrics ports do not.
    outside = connect_from_pod(
        cluster,
        other_namespace,
        {
            "api-service": ["kubernetes.default.svc.cluster.local", 443],
            "api-endpoint": [api_ip, api_port],
            "target-pod": [target_ip, 8080],
            "agent-api": [agent_ip, 8642],
            "agent-api-service": [agent_svc, 8642],
            "agent-metrics": [agent_ip, 9090],
            "agent-metrics-service": [metrics_svc, 9090],
        },
    )
    print(f"from {other_namespace}: {json.dumps(outside, indent=2)}")
    assert [outside[n] for n in ("api-service", "api-endpoint", "target-pod")] == ["open"] * 3
    assert not blocked(
        outside, "agent-api", "agent-api-service", "agent-metrics", "agent-metrics-service"
    ), outside

    # From inside the agent container: its model endpoint answers, nothing else does.
    inside = connect_from_agent(
        cluster,
        namespace,
        {
            "fake-llm": ["fake-llm", 8080],
            "api-service": ["kubernetes.default.svc", 443],
            "api-endpoint": [api_ip, api_port],
            "other-namespace-pod": [target_ip, 8080],
            "other-namespace-service": [target_svc, 8080],
            "metadata": ["169.254.169.254", 80],
        },
    )
    print(f"from the agent container: {json.dumps(inside, indent=2)}")
    assert inside["fake-llm"] == "open", inside
    assert not blocked(
        inside,
        "api-service",
        "api-endpoint",
        "other-namespace-pod",
        "other-namespace-service",
        "metadata",
    ), inside

    # The release still works: a conversation through the fake LLM, `helm test`, a backup.
    reply = converse(cluster, namespace, api_key(cluster, namespace))
    assert "REACHED" in reply.splitlines() and '"choices"' in reply, reply
    helm.test(RELEASE)
    kube.run_job_from_cronjob(cluster, namespace, f"{FULLNAME}-backup")
