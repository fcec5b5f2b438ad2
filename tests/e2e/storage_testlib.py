"""Storage the fault tests break on purpose: a bucket that can go down and come back with its
data, and a data volume small enough to fill.

Why a bucket on a PVC: tests/e2e/charts/s3-backend keeps SeaweedFS' data in an emptyDir, so
scaling it to 0 would delete the restic repository, and "the repository is intact after the
outage" could not be checked. The test patches the Deployment to a PVC of its namespace
(strategic merge on the volume named `data`) before anything is written, and has it
advertise 127.0.0.1 instead of the pod's IP, which a restarted pod would not have.

Why a tmpfs for a full volume: kind's local-path provisioner hands out folders of the node's
disk whatever the PVC's size says, and filling that disk would take every other pod (and the
machine) with it. A privileged pod in a namespace of its own mounts a tmpfs of a few MiB on
the node (a hostPath with Bidirectional mount propagation) and a static PersistentVolume of
type `local` points at it; the claim bound to it is the agent's `persistence.existingClaim`.
The tmpfs is unmounted when that pod stops (its TERM trap), and the memory is freed when the
last pod using the volume is gone.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
from botocore.exceptions import BotoCoreError, ClientError
from kubernetes import client
from kubernetes.client.rest import ApiException

from . import images, kube

S3_CHART = Path(__file__).parent / "charts" / "s3-backend"
S3_DEPLOYMENT = "s3"
S3_CLAIM = "s3-data"
# The s3-backend chart's defaults (test-only credentials).
S3_BUCKET = "backups"
S3_KEYS = ("e2e-access-key", "e2e-secret-key-0123456789")
CANARY = "e2e-canary"  # an object outside every test's prefix, read back after a restart
NODE_VOLUMES = "/var/lib/hermes-e2e-volumes"  # on the node, where the tmpfs volumes go
TMPFS_CLASS = "hermes-e2e-tmpfs"  # a storageClassName no provisioner serves: static only
PRIVILEGED_LABELS = {
    "pod-security.kubernetes.io/enforce": "privileged",
    "pod-security.kubernetes.io/warn": "privileged",
    "pod-security.kubernetes.io/audit": "privileged",
}
# Runs as root in the privileged maker pod: mount, report, unmount on TERM.
MAKER_SCRIPT = """
set -eu
dir="/host/$VOLUME"
mkdir -p "$dir"
mount -t tmpfs -o "size=${SIZE_MIB}m,mode=0777" tmpfs "$dir"
echo "mounted tmpfs of ${SIZE_MIB} MiB at $dir"
trap 'umount "$dir" && rmdir "$dir" && echo unmounted; exit 0' TERM INT
while :; do sleep 1; done
"""


def install_s3_on_a_volume(cluster: kube.Cluster, namespace: str, helm: kube.Helm) -> None:
    """SeaweedFS from the s3-backend chart, its data moved to PVC `s3-data` (see above)."""
    helm.install("s3", S3_CHART, set_values={"image": images.ref("seaweedfs")}, timeout="3m")
    claim = client.V1PersistentVolumeClaim(
        metadata=client.V1ObjectMeta(name=S3_CLAIM),
        spec=client.V1PersistentVolumeClaimSpec(
            access_modes=["ReadWriteOnce"],
            resources=client.V1VolumeResourceRequirements(requests={"storage": "1Gi"}),
        ),
    )
    cluster.core.create_namespaced_persistent_volume_claim(namespace, claim)
    patch = {
        "spec": {
            "template": {
                "spec": {
                    "volumes": [
                        {
                            "name": "data",
                            "emptyDir": None,
                            "persistentVolumeClaim": {"claimName": S3_CLAIM},
                        }
                    ]
                }
            }
        }
    }
    kube.kubectl(cluster, namespace, "patch", "deployment", S3_DEPLOYMENT, "-p", json.dumps(patch))
    # `weed mini` keeps the address it advertised with its data and reads chunks through it
    # after a restart: the pod's IP changes then, loopback (S3 and volume server share the
    # process) does not.
    args = cluster.apps.read_namespaced_deployment(S3_DEPLOYMENT, namespace).spec.template
    ((index, arg),) = [
        (i, a) for i, a in enumerate(args.spec.containers[0].args) if a.startswith("-ip=")
    ]
    path = f"/spec/template/spec/containers/0/args/{index}"
    loopback = [
        {"op": "test", "path": path, "value": arg},
        {"op": "replace", "path": path, "value": "-ip=127.0.0.1"},
    ]
    kube.kubectl(
        cluster,
        namespace,
        "patch",
        "deployment",
        S3_DEPLOYMENT,
        "--type=json",
        "-p",
        json.dumps(loopback),
    )
    kube.kubectl(
        cluster, namespace, "rollout", "status", f"deployment/{S3_DEPLOYMENT}", "--timeout=240s"
    )
    kube.wait_until(lambda: _put_canary_once(cluster, namespace), 120, "a first write", 2)


def _bucket(port: int) -> Any:
    return boto3.client(
        "s3",
        endpoint_url=f"http://127.0.0.1:{port}",
        aws_access_key_id=S3_KEYS[0],
        aws_secret_access_key=S3_KEYS[1],
        region_name="us-east-1",
    )


def _put_canary_once(cluster: kube.Cluster, namespace: str) -> bool:
    with kube.port_forward(cluster, namespace, f"svc/{S3_DEPLOYMENT}", 8333) as port:
        try:
            _bucket(port).put_object(Bucket=S3_BUCKET, Key=CANARY, Body=b"written before")
        except (BotoCoreError, ClientError) as exc:
            print(f"bucket not writable yet: {exc}")
            return False
    return True


def canary_readable(cluster: kube.Cluster, namespace: str) -> bool:
    """Whether the bucket serves the canary: SeaweedFS answers /healthz before its volume
    server has registered its volumes again, and reads fail until it has."""
    with kube.port_forward(cluster, namespace, f"svc/{S3_DEPLOYMENT}", 8333) as port:
        try:
            body = _bucket(port).get_object(Bucket=S3_BUCKET, Key=CANARY)["Body"].read()
        except (BotoCoreError, ClientError) as exc:
            print(f"bucket not serving yet: {exc}")
            return False
    return bool(body == b"written before")


STANDIN = "s3-refuses"  # stands in for SeaweedFS while the bucket is down


def s3_pods(cluster: kube.Cluster, namespace: str) -> list[client.V1Pod]:
    """SeaweedFS' pods (not the stand-in)."""
    pods = cluster.core.list_namespaced_pod(namespace, label_selector="app=s3").items
    return [p for p in pods if p.metadata.name != STANDIN]


def bucket_down(cluster: kube.Cluster, namespace: str) -> None:
    """SeaweedFS scaled to 0, and in its place a pod that refuses connections on 8333.

    Not a force delete: the API then forgets the pod at once while its container still
    serves through not yet updated rules. The stand-in: see `refusing_standin`.
    """
    kube.kubectl(cluster, namespace, "scale", f"deployment/{S3_DEPLOYMENT}", "--replicas=0")
    kube.wait_until(lambda: not s3_pods(cluster, namespace), 120, "the s3 pod gone")
    refusing_standin(cluster, namespace, STANDIN, {"app": "s3"}, "s3", 8333)


def refusing_standin(
    cluster: kube.Cluster,
    namespace: str,
    name: str,
    labels: dict[str, str],
    port_name: str,
    port: int,
) -> None:
    """A Ready pod with a Service's labels and its named port, nothing listening: every
    connection to the Service is refused, as it is to a server that is down.

    Why: on a cluster whose kube-proxy rejects traffic to a Service without endpoints,
    scaling the server to 0 is enough. In this kind cluster it was not: such connections left
    the node and the sandbox's egress interceptor answered them (HTTP 404, `Server: keryx`);
    a pod too new for kube-router to have applied its NetworkPolicy got that answer (a
    backup Job: "The specified bucket does not exist"; vault-render: "nothing found").
    """
    pod = kube.restricted_pod(name, images.ref("busybox"), ["sleep", "86400"])
    pod.metadata.labels = dict(labels)
    pod.spec.restart_policy = "Always"
    pod.spec.termination_grace_period_seconds = 1
    # The Service targets the port by name: declared, so the endpoint carries it.
    pod.spec.containers[0].ports = [client.V1ContainerPort(name=port_name, container_port=port)]
    cluster.core.create_namespaced_pod(namespace, pod)
    kube.wait_until(lambda: _ready(cluster, namespace, name), 120, f"stand-in {name} Ready")


def remove_standin(cluster: kube.Cluster, namespace: str, name: str) -> None:
    cluster.core.delete_namespaced_pod(name, namespace)

    def gone() -> bool:
        return name not in {
            p.metadata.name for p in cluster.core.list_namespaced_pod(namespace).items
        }

    kube.wait_until(gone, 120, f"stand-in {name} gone")


def bucket_up(cluster: kube.Cluster, namespace: str) -> None:
    """The stand-in gone, SeaweedFS back (same PVC); returns once it serves what it held."""
    remove_standin(cluster, namespace, STANDIN)
    kube.kubectl(cluster, namespace, "scale", f"deployment/{S3_DEPLOYMENT}", "--replicas=1")
    kube.kubectl(
        cluster, namespace, "rollout", "status", f"deployment/{S3_DEPLOYMENT}", "--timeout=240s"
    )
    kube.wait_until(
        lambda: canary_readable(cluster, namespace), 180, "the bucket serving again", interval=2
    )


def _ready(cluster: kube.Cluster, namespace: str, name: str) -> bool:
    conditions = cluster.core.read_namespaced_pod(name, namespace).status.conditions or []
    return any(c.type == "Ready" and c.status == "True" for c in conditions)


def _maker_pod(volume: str, size_mib: int) -> client.V1Pod:
    container = client.V1Container(
        name="main",
        image=images.ref("busybox"),
        image_pull_policy=images.PULL_POLICY,
        command=["sh", "-c", MAKER_SCRIPT],
        env=[
            client.V1EnvVar(name="VOLUME", value=volume),
            client.V1EnvVar(name="SIZE_MIB", value=str(size_mib)),
        ],
        security_context=client.V1SecurityContext(privileged=True, run_as_user=0),
        volume_mounts=[
            client.V1VolumeMount(name="host", mount_path="/host", mount_propagation="Bidirectional")
        ],
        readiness_probe=client.V1Probe(
            _exec=client.V1ExecAction(
                command=["sh", "-c", f'grep -q " /host/{volume} tmpfs " /proc/mounts']
            ),
            period_seconds=1,
        ),
    )
    spec = client.V1PodSpec(
        containers=[container],
        automount_service_account_token=False,
        termination_grace_period_seconds=10,
        volumes=[
            client.V1Volume(
                name="host",
                host_path=client.V1HostPathVolumeSource(
                    path=NODE_VOLUMES, type="DirectoryOrCreate"
                ),
            )
        ],
    )
    return client.V1Pod(metadata=client.V1ObjectMeta(name="tmpfs-maker"), spec=spec)


def _has_serviceaccount(cluster: kube.Cluster, namespace: str) -> bool:
    accounts = cluster.core.list_namespaced_service_account(namespace).items
    return any(a.metadata.name == "default" for a in accounts)


def _static_volume(volume: str, namespace: str, claim: str, node: str, size_mib: int) -> Any:
    selector = client.V1NodeSelectorRequirement(
        key="kubernetes.io/hostname", operator="In", values=[node]
    )
    return client.V1PersistentVolume(
        metadata=client.V1ObjectMeta(name=volume, labels={"hermes-runtime/e2e": "tmpfs"}),
        spec=client.V1PersistentVolumeSpec(
            capacity={"storage": f"{size_mib}Mi"},
            access_modes=["ReadWriteOnce"],
            persistent_volume_reclaim_policy="Retain",
            storage_class_name=TMPFS_CLASS,
            local=client.V1LocalVolumeSource(path=f"{NODE_VOLUMES}/{volume}"),
            claim_ref=client.V1ObjectReference(namespace=namespace, name=claim),
            node_affinity=client.V1VolumeNodeAffinity(
                required=client.V1NodeSelector(
                    node_selector_terms=[client.V1NodeSelectorTerm(match_expressions=[selector])]
                )
            ),
        ),
    )


@contextlib.contextmanager
def small_volume(cluster: kube.Cluster, namespace: str, claim: str, size_mib: int) -> Iterator[str]:
    """PVC ``claim`` in ``namespace`` on a tmpfs of ``size_mib`` MiB (writes past it: ENOSPC).

    Yields the node it lives on. Everything made here (the maker's namespace, the PV) is
    deleted on the way out, the claim with the test's namespace.
    """
    volume = f"{namespace}-tmpfs"[:63]
    maker_namespace = f"{namespace}-node"[:63]
    cluster.core.create_namespace(
        client.V1Namespace(
            metadata=client.V1ObjectMeta(name=maker_namespace, labels=PRIVILEGED_LABELS)
        )
    )
    try:
        kube.wait_until(
            lambda: _has_serviceaccount(cluster, maker_namespace),
            60,
            f"default ServiceAccount in {maker_namespace}",
        )
        cluster.core.create_namespaced_pod(maker_namespace, _maker_pod(volume, size_mib))
        kube.wait_until(
            lambda: _ready(cluster, maker_namespace, "tmpfs-maker"),
            120,
            f"tmpfs of {size_mib} MiB mounted on the node",
        )
        node = cluster.core.read_namespaced_pod("tmpfs-maker", maker_namespace).spec.node_name
        cluster.core.create_persistent_volume(
            _static_volume(volume, namespace, claim, node, size_mib)
        )
        cluster.core.create_namespaced_persistent_volume_claim(
            namespace,
            client.V1PersistentVolumeClaim(
                metadata=client.V1ObjectMeta(name=claim),
                spec=client.V1PersistentVolumeClaimSpec(
                    access_modes=["ReadWriteOnce"],
                    storage_class_name=TMPFS_CLASS,
                    volume_name=volume,
                    resources=client.V1VolumeResourceRequirements(
                        requests={"storage": f"{size_mib}Mi"}
                    ),
                ),
            ),
        )
        yield str(node)
    finally:
        with contextlib.suppress(ApiException):
            cluster.core.delete_persistent_volume(volume)
        kube.delete_namespace(cluster, maker_namespace)
