"""Scenario 1: install the real chart with values-examples/ci.yaml.

The agent (with the in-cluster fake LLM behind it, and its backup CronJob on a
WaitForFirstConsumer backup PVC) becomes Ready in a Pod Security "restricted"
namespace, `/health` answers through the Service from another pod, and `helm test`
passes. No plugin: the git-sync image cannot be built here (values-examples/ci.yaml).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from kubernetes import client

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


@pytest.mark.timeout(600)
def test_a_secret_someone_else_created_is_refused_at_once_and_named(
    cluster: kube.Cluster, namespace: str, helm: kube.Helm
) -> None:
    """Whoever can create Secrets in the namespace pre-seeds the backup password the chart
    would generate: the install fails at the secrets Job's first refusal (its podFailurePolicy,
    no retries), and what Helm prints names the Secret and the value that adopts it."""
    images.require(IMAGES)
    password = f"{RELEASE}-hermes-agent-backup-password"
    seeded = client.V1Secret(
        metadata=client.V1ObjectMeta(name=password),
        string_data={"RESTIC_PASSWORD": "known-to-whoever-made-it"},
    )
    created = cluster.core.create_namespaced_secret(namespace, seeded)
    with pytest.raises(AssertionError) as failed:
        helm.install(RELEASE, CHART, values=[CI_VALUES], timeout="4m")
    said = str(failed.value)
    assert password in said and "secretsJob.adoptExisting" in said, said[-3000:]
    batch = client.BatchV1Api(cluster.api)
    job = batch.read_namespaced_job(f"{RELEASE}-hermes-agent-secrets", namespace)
    reasons = [c.reason for c in job.status.conditions or [] if c.type == "Failed"]
    assert reasons == ["PodFailurePolicy"], job.status
    tries = cluster.core.list_namespaced_pod(
        namespace, label_selector=f"job-name={job.metadata.name}"
    )
    assert len(tries.items) == 1, [p.metadata.name for p in tries.items]  # no retry
    kept = cluster.core.read_namespaced_secret(password, namespace)  # untouched, not marked
    assert kept.metadata.resource_version == created.metadata.resource_version
