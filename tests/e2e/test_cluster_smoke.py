"""The cluster basics every chart scenario relies on, proved with a tiny chart.

Dynamic PVCs (provisioned on demand and kept across pod restarts), Pod Security
"restricted" admission (a compliant workload runs, a privileged one is
refused), and Services reached by DNS name from another pod.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from . import images, kube

SMOKE_CHART = Path(__file__).parent / "charts" / "smoke"
BUSYBOX = images.ref("busybox")
MESSAGE = "hello from the smoke chart"


def fetch_by_name(cluster: kube.Cluster, namespace: str, url: str) -> kube.PodResult:
    return kube.http_get_in_cluster(cluster, namespace, url, BUSYBOX)


def ready_pods(cluster: kube.Cluster, namespace: str, selector: str) -> list[client.V1Pod]:
    pods = cluster.core.list_namespaced_pod(namespace, label_selector=selector).items
    return [
        p
        for p in pods
        if p.metadata.deletion_timestamp is None
        and any(c.type == "Ready" and c.status == "True" for c in p.status.conditions or [])
    ]


def test_chart_with_pvc_runs_under_restricted_and_is_reachable_by_service_name(
    cluster: kube.Cluster, namespace: str, helm: kube.Helm
) -> None:
    helm.install("smoke", SMOKE_CHART, timeout="3m")

    pvc = cluster.core.read_namespaced_persistent_volume_claim("smoke-data", namespace)
    assert pvc.status.phase == "Bound"
    pv = client.CoreV1Api(cluster.api).read_persistent_volume(pvc.spec.volume_name)
    assert pv.metadata.annotations.get("pv.kubernetes.io/provisioned-by"), (
        "PV was not dynamically provisioned"
    )

    for url in (
        "http://smoke/index.html",
        f"http://smoke.{namespace}.svc.cluster.local/index.html",
    ):
        result = fetch_by_name(cluster, namespace, url)
        assert result.phase == "Succeeded", result.logs
        assert MESSAGE in result.logs

    helm.test("smoke")


def test_volume_survives_pod_replacement(
    cluster: kube.Cluster, namespace: str, helm: kube.Helm
) -> None:
    helm.install("smoke", SMOKE_CHART, timeout="3m")
    (first,) = ready_pods(cluster, namespace, "app=smoke")
    cluster.core.delete_namespaced_pod(first.metadata.name, namespace)

    def replaced() -> bool:
        pods = ready_pods(cluster, namespace, "app=smoke")
        return len(pods) == 1 and pods[0].metadata.name != first.metadata.name

    kube.wait_until(replaced, 120, "a replacement smoke pod to become Ready")
    result = fetch_by_name(cluster, namespace, "http://smoke/index.html")
    lines = [line for line in result.logs.splitlines() if MESSAGE in line]
    assert len(lines) == 2, (
        f"expected the first pod's line kept plus the new one, got {result.logs!r}"
    )


def test_restricted_namespace_refuses_a_privileged_pod(
    cluster: kube.Cluster, namespace: str
) -> None:
    pod = kube.restricted_pod("privileged", BUSYBOX, ["sleep", "1"])
    pod.spec.containers[0].security_context = client.V1SecurityContext(privileged=True)
    with pytest.raises(ApiException) as refused:
        cluster.core.create_namespaced_pod(namespace, pod)
    assert refused.value.status == 403
    assert "violates PodSecurity" in str(refused.value.body)
