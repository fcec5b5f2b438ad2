"""Scenario 1: install the real chart with values-examples/ci.yaml.

The agent (with the in-cluster fake LLM behind it, and its backup CronJob on a
WaitForFirstConsumer backup PVC) becomes Ready in a Pod Security "restricted"
namespace, `/health` answers through the Service from another pod, and `helm test`
passes. No plugin: the git-sync image cannot be built here (values-examples/ci.yaml).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from . import images, kube

CHART = kube.REPO_ROOT / "charts" / "hermes-agent"
CI_VALUES = images.ci_values()  # values-examples/ci.yaml, pulling from the registry
BACKENDS_CHART = Path(__file__).parent / "charts" / "ci-backends"
PROBE_IMAGE = images.ref("busybox")
RELEASE = "hermes"
# What values-examples/ci.yaml and the backends chart run, pulled from the registry.
IMAGES = [
    "agent",
    "git-server",
    "fake-llm",
    "busybox",
]


def agent_service(cluster: kube.Cluster, namespace: str) -> tuple[str, int]:
    selector = f"app.kubernetes.io/instance={RELEASE},app.kubernetes.io/component=agent"
    (service,) = cluster.core.list_namespaced_service(namespace, label_selector=selector).items
    (port,) = [p.port for p in service.spec.ports if p.name == "http"]
    return service.metadata.name, port


@pytest.mark.timeout(900)
def test_install_with_ci_values_is_ready_healthy_and_passes_helm_test(
    cluster: kube.Cluster, namespace: str, helm: kube.Helm
) -> None:
    images.require(IMAGES)
    helm.install("backends", BACKENDS_CHART, timeout="3m")
    helm.install(RELEASE, CHART, values=[CI_VALUES], timeout="5m")

    selector = f"app.kubernetes.io/instance={RELEASE},app.kubernetes.io/component=agent"
    pods = cluster.core.list_namespaced_pod(namespace, label_selector=selector).items
    assert pods, f"no agent pod with labels {selector}"
    for pod in pods:
        ready = [c.status for c in pod.status.conditions or [] if c.type == "Ready"]
        assert ready == ["True"], (
            f"agent pod {pod.metadata.name} not Ready: {pod.status.conditions}"
        )

    name, port = agent_service(cluster, namespace)
    url = f"http://{name}:{port}/health"
    result = kube.http_get_in_cluster(cluster, namespace, url, PROBE_IMAGE)
    assert result.phase == "Succeeded", f"GET {url} failed: {result.logs}"
    assert result.logs.strip(), f"GET {url} returned an empty body"

    helm.test(RELEASE)
