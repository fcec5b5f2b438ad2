"""The harness' provisioner watchdog (kube.ProvisionerWatchdog) frees a stalled provisioner.

Seen in CI: kind's local-path provisioner stopped provisioning and every later PVC stayed
Pending for 12 minutes, until its pod was deleted. Here a provisioner of the test's own (the
cluster's local-path image and RBAC, under a provisioner name and a StorageClass of its own,
in a privileged namespace of its own) is frozen with SIGSTOP by a sidecar sharing its process
namespace, so nothing of the cluster's provisioner or of other tests is touched. A PVC of
that class, needed by a pod, then waits on it; the watchdog (stall threshold 20 s) must
delete the frozen pod, its Deployment makes a new one, and the PVC is bound and written.

Without the watchdog, or with one that does not act, the PVC stays Pending and the wait
for it fails.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from . import images, kube
from .storage_testlib import PRIVILEGED_LABELS

CLUSTER_PROVISIONER = kube.Provisioner()  # whose image, RBAC and helper config are copied
LABEL = {"app": "stalled-provisioner"}
ACCOUNT = "local-path-provisioner-service-account"  # the helper pods' default account
STALL_SECONDS = 20.0


def cluster_provisioner_spec(cluster: kube.Cluster) -> tuple[str, dict[str, str], str]:
    """The cluster's local-path image, its helper ConfigMap data and its ClusterRole."""
    rbac = client.RbacAuthorizationV1Api(cluster.api)
    deployment = cluster.apps.read_namespaced_deployment(
        "local-path-provisioner", CLUSTER_PROVISIONER.namespace
    )
    image = deployment.spec.template.spec.containers[0].image
    config = cluster.core.read_namespaced_config_map(
        "local-path-config", CLUSTER_PROVISIONER.namespace
    ).data
    bindings = rbac.list_cluster_role_binding().items
    (role,) = {
        b.role_ref.name
        for b in bindings
        if any(s.namespace == CLUSTER_PROVISIONER.namespace for s in b.subjects or [])
    }
    return str(image), dict(config), str(role)


def provisioner_deployment(image: str, name: str, namespace: str) -> client.V1Deployment:
    """local-path under ``name``, and a busybox sidecar that can SIGSTOP it."""
    main = client.V1Container(
        name="provisioner",
        image=image,
        image_pull_policy="IfNotPresent",
        command=["local-path-provisioner", "--debug", "start", "--config"],
        args=["/etc/config/config.json", "--provisioner-name", name, "--namespace", namespace],
        env=[client.V1EnvVar(name="CONFIG_MOUNT_PATH", value="/etc/config/")],
        volume_mounts=[client.V1VolumeMount(name="config", mount_path="/etc/config/")],
    )
    freezer = client.V1Container(
        name="freezer",
        image=images.ref("busybox"),
        image_pull_policy=images.PULL_POLICY,
        command=["sh", "-c", "while :; do sleep 1; done"],
        security_context=client.V1SecurityContext(run_as_user=0),
    )
    template = client.V1PodTemplateSpec(
        metadata=client.V1ObjectMeta(labels=LABEL),
        spec=client.V1PodSpec(
            service_account_name=ACCOUNT,
            share_process_namespace=True,
            termination_grace_period_seconds=5,
            containers=[main, freezer],
            volumes=[
                client.V1Volume(
                    name="config",
                    config_map=client.V1ConfigMapVolumeSource(name="local-path-config"),
                )
            ],
        ),
    )
    return client.V1Deployment(
        metadata=client.V1ObjectMeta(name="stalled-provisioner"),
        spec=client.V1DeploymentSpec(
            replicas=1,
            selector=client.V1LabelSelector(match_labels=LABEL),
            template=template,
        ),
    )


@contextlib.contextmanager
def own_provisioner(cluster: kube.Cluster, namespace: str) -> Iterator[kube.Provisioner]:
    """A local-path provisioner named after ``namespace``, with its StorageClass (same name)."""
    image, config, role = cluster_provisioner_spec(cluster)
    home = f"{namespace}-lp"[:63]
    name = f"hermes-e2e/{namespace}"
    rbac = client.RbacAuthorizationV1Api(cluster.api)
    storage = client.StorageV1Api(cluster.api)
    cluster.core.create_namespace(
        client.V1Namespace(metadata=client.V1ObjectMeta(name=home, labels=PRIVILEGED_LABELS))
    )
    try:
        cluster.core.create_namespaced_service_account(
            home, client.V1ServiceAccount(metadata=client.V1ObjectMeta(name=ACCOUNT))
        )
        subject = client.RbacV1Subject(kind="ServiceAccount", name=ACCOUNT, namespace=home)
        rbac.create_cluster_role_binding(
            client.V1ClusterRoleBinding(
                metadata=client.V1ObjectMeta(name=home, labels={"hermes-runtime/e2e": "lp"}),
                role_ref=client.V1RoleRef(
                    api_group="rbac.authorization.k8s.io", kind="ClusterRole", name=role
                ),
                subjects=[subject],
            )
        )
        rbac.create_namespaced_role(
            home,
            client.V1Role(
                metadata=client.V1ObjectMeta(name="helper-pods"),
                rules=[
                    client.V1PolicyRule(
                        api_groups=[""],
                        resources=["pods"],
                        verbs=["get", "list", "watch", "create", "patch", "update", "delete"],
                    )
                ],
            ),
        )
        rbac.create_namespaced_role_binding(
            home,
            client.V1RoleBinding(
                metadata=client.V1ObjectMeta(name="helper-pods"),
                role_ref=client.V1RoleRef(
                    api_group="rbac.authorization.k8s.io", kind="Role", name="helper-pods"
                ),
                subjects=[subject],
            ),
        )
        cluster.core.create_namespaced_config_map(
            home,
            client.V1ConfigMap(metadata=client.V1ObjectMeta(name="local-path-config"), data=config),
        )
        storage.create_storage_class(
            client.V1StorageClass(
                metadata=client.V1ObjectMeta(name=home, labels={"hermes-runtime/e2e": "lp"}),
                provisioner=name,
                reclaim_policy="Delete",
                volume_binding_mode="WaitForFirstConsumer",
            )
        )
        cluster.apps.create_namespaced_deployment(home, provisioner_deployment(image, name, home))
        yield kube.Provisioner(name=name, namespace=home, selector="app=stalled-provisioner")
    finally:
        for delete in (
            lambda: storage.delete_storage_class(home),
            lambda: rbac.delete_cluster_role_binding(home),
        ):
            with contextlib.suppress(ApiException):
                delete()
        kube.delete_namespace(cluster, home)


def started(cluster: kube.Cluster, provisioner: kube.Provisioner) -> str:
    """The provisioner's pod once its controller runs."""
    found: list[str] = []

    def running() -> bool:
        pods = cluster.core.list_namespaced_pod(
            provisioner.namespace, label_selector=provisioner.selector
        ).items
        for pod in pods:
            if pod.status.phase == "Running" and pod.metadata.deletion_timestamp is None:
                log = kube.pod_log(cluster, provisioner.namespace, pod.metadata.name, "provisioner")
                if "Started provisioner controller" in log:
                    found[:] = [pod.metadata.name]
                    return True
        return False

    kube.wait_until(running, 180, f"provisioner {provisioner.name} started", interval=2)
    return found[0]


def claim_and_consumer(cluster: kube.Cluster, namespace: str, class_name: str) -> None:
    claim = client.V1PersistentVolumeClaim(
        metadata=client.V1ObjectMeta(name="waits"),
        spec=client.V1PersistentVolumeClaimSpec(
            access_modes=["ReadWriteOnce"],
            storage_class_name=class_name,
            resources=client.V1VolumeResourceRequirements(requests={"storage": "16Mi"}),
        ),
    )
    cluster.core.create_namespaced_persistent_volume_claim(namespace, claim)
    write = "echo written > /data/proof && cat /data/proof"
    pod = kube.restricted_pod("consumer", images.ref("busybox"), ["sh", "-c", write])
    pod.spec.containers[0].volume_mounts = [client.V1VolumeMount(name="data", mount_path="/data")]
    pod.spec.volumes = [
        client.V1Volume(
            name="data",
            persistent_volume_claim=client.V1PersistentVolumeClaimVolumeSource(claim_name="waits"),
        )
    ]
    pod.spec.security_context = client.V1PodSecurityContext(fs_group=65534)
    cluster.core.create_namespaced_pod(namespace, pod)


def pod_phase(cluster: kube.Cluster, namespace: str, name: str) -> str:
    return str(cluster.core.read_namespaced_pod(name, namespace).status.phase)


def volume_exists(cluster: kube.Cluster, name: str) -> bool:
    return name in {v.metadata.name for v in cluster.core.list_persistent_volume().items}


def claim_phase(cluster: kube.Cluster, namespace: str) -> str:
    return str(
        cluster.core.read_namespaced_persistent_volume_claim("waits", namespace).status.phase
    )


@pytest.mark.timeout(600)
def test_watchdog_deletes_a_stalled_provisioner_and_the_claim_is_bound(
    cluster: kube.Cluster, namespace: str
) -> None:
    images.require(["busybox"])
    with own_provisioner(cluster, namespace) as provisioner:
        frozen = started(cluster, provisioner)
        kube.kubectl(
            cluster,
            provisioner.namespace,
            "exec",
            frozen,
            "-c",
            "freezer",
            "--",
            "sh",
            "-c",
            "kill -STOP $(pidof local-path-provisioner)",
        )
        stalled_at = time.monotonic()
        claim_and_consumer(cluster, namespace, provisioner.namespace)
        watchdog = kube.ProvisionerWatchdog(
            cluster, namespace, provisioner, stall_seconds=STALL_SECONDS, poll_seconds=2
        )
        with watchdog:
            kube.wait_until(
                lambda: claim_phase(cluster, namespace) == "Bound", 240, "PVC waits Bound"
            )
        bound_after = time.monotonic() - stalled_at
        assert len(watchdog.restarts) == 1, watchdog.restarts
        assert frozen in watchdog.restarts[0] and "waits" in watchdog.restarts[0]
        kube.wait_until(
            lambda: pod_phase(cluster, namespace, "consumer") == "Succeeded",
            120,
            "the consumer pod wrote its volume",
        )
        assert kube.pod_log(cluster, namespace, "consumer").strip() == "written"
        print(f"stalled provisioner replaced; PVC bound {bound_after:.0f} s after the stall")
        # Its volume is deleted by the new provisioner while it still runs.
        cluster.core.delete_namespaced_pod("consumer", namespace, grace_period_seconds=0)
        volume = cluster.core.read_namespaced_persistent_volume_claim(
            "waits", namespace
        ).spec.volume_name
        cluster.core.delete_namespaced_persistent_volume_claim("waits", namespace)
        kube.wait_until(
            lambda: not volume_exists(cluster, volume),
            120,
            f"volume {volume} deleted by the provisioner",
        )
