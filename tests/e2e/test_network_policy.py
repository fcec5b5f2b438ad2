"""The chart's NetworkPolicies on a CNI that enforces them (kube-router in the kind node image).

With `networkPolicy.enabled` and `allowExternal: false`, a pod without the client label cannot
reach the agent, while everything the release needs still works: a labelled client through the
Service, the agent's calls to the model endpoint (resolved through cluster DNS), `helm test`, and
a backup job. The unlabelled probe runs only after the labelled one got through, so "blocked"
cannot be a Service that is not ready yet.
"""

from __future__ import annotations

import json
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
CLIENT_LABEL = f"{FULLNAME}-client"
POLICY_VALUES = {"networkPolicy": {"enabled": True, "allowExternal": False}}
# Each probe prints one verdict line. It retries: a new pod may be refused for a moment until
# the CNI has programmed its rules, so only a refusal that lasts counts as BLOCKED.
PROBE = (
    'n=0; while [ "$n" -lt 10 ]; do '
    'if timeout 8 wget -q -O /tmp/body --header "Authorization: Bearer $KEY" '
    '--header "Content-Type: application/json" --post-data "$BODY" "$URL"; '
    "then echo REACHED; cat /tmp/body; exit 0; fi; n=$((n + 1)); sleep 1; done; echo BLOCKED"
)


def probe(cluster: kube.Cluster, namespace: str, labels: dict[str, str], key: str) -> str:
    """POST a chat completion to the agent's Service from a fresh pod with `labels`."""
    pod = kube.restricted_pod(
        kube.unique_name("np-probe"), images.ref("busybox"), ["sh", "-c", PROBE]
    )
    pod.metadata.labels = labels
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


def verdict(logs: str) -> str:
    """The probe's REACHED/BLOCKED line (wget's own error lines come before it)."""
    (line,) = [line for line in logs.splitlines() if line in ("REACHED", "BLOCKED")]
    return line


@pytest.mark.timeout(900)
def test_policy_blocks_unlabelled_pods_and_allows_what_the_release_needs(
    cluster: kube.Cluster, namespace: str, helm: kube.Helm, tmp_path: Path
) -> None:
    images.require(["agent", "fake-llm", "git-server", "busybox"])
    helm.install("backends", BACKENDS_CHART, timeout="3m")
    extra = tmp_path / "policy.yaml"
    extra.write_text(json.dumps(POLICY_VALUES))
    helm.install(RELEASE, CHART, values=[CI_VALUES, extra], timeout="5m")
    policies = client.NetworkingV1Api(cluster.api).list_namespaced_network_policy(namespace)
    assert {p.metadata.name for p in policies.items} >= {FULLNAME, f"{FULLNAME}-test"}
    key = api_key(cluster, namespace)

    allowed = probe(cluster, namespace, {CLIENT_LABEL: "true"}, key)
    assert verdict(allowed) == "REACHED", f"a labelled client was refused:\n{allowed}"
    # The reply came back from the fake LLM: egress to the model endpoint and DNS work.
    assert '"choices"' in allowed, allowed

    blocked = probe(cluster, namespace, {"app": "stranger"}, key)
    # kube-router rejects (connection refused) rather than drops: either way, no reply.
    assert verdict(blocked) == "BLOCKED", f"an unlabelled pod reached the agent:\n{blocked}"
    assert '"choices"' not in blocked, blocked

    helm.test(RELEASE)
    kube.run_job_from_cronjob(cluster, namespace, f"{FULLNAME}-backup")
