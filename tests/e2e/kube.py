"""Helpers for the end-to-end suite: namespaces, helm, in-cluster probes, diagnostics.

Why a module and not only fixtures: scenarios (plugins, backup, upgrade, vault)
compose these steps differently; plain functions over a small `Cluster` record
keep each scenario short and make the failure output the same everywhere.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import subprocess
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import urllib3
from kubernetes import client, config
from kubernetes.client.rest import ApiException
from support.wait import wait_until as poll

from . import images

REPO_ROOT = Path(__file__).resolve().parents[2]
TOOLS_BIN = REPO_ROOT / ".cache" / "tools" / "bin"
RESTRICTED_LABELS = {
    "pod-security.kubernetes.io/enforce": "restricted",
    "pod-security.kubernetes.io/enforce-version": "latest",
    "pod-security.kubernetes.io/warn": "restricted",
    "pod-security.kubernetes.io/audit": "restricted",
}
LOG_TAIL_LINES = 200
TRANSPORT_ATTEMPTS = 3


@dataclass(frozen=True)
class Cluster:
    """A connection to the cluster under test: kubeconfig path + API client."""

    kubeconfig: Path
    api: client.ApiClient

    @property
    def core(self) -> client.CoreV1Api:
        return client.CoreV1Api(self.api)

    @property
    def apps(self) -> client.AppsV1Api:
        return client.AppsV1Api(self.api)


def connect(kubeconfig: Path) -> Cluster:
    """Connect and prove the API answers, so a dead cluster fails once, clearly."""
    if not kubeconfig.is_file():
        raise RuntimeError(
            f"kubeconfig {kubeconfig} does not exist: run `make cluster` or set KUBECONFIG"
        )
    api = config.new_client_from_config(config_file=str(kubeconfig))
    try:
        client.VersionApi(api).get_code()
    except Exception as exc:  # any transport error means the same thing here
        raise RuntimeError(f"the cluster in {kubeconfig} does not answer: {exc}") from exc
    return Cluster(kubeconfig=kubeconfig, api=api)


def tool(name: str) -> str:
    """Path of helm/kubectl: the project's pinned copy first, then PATH."""
    pinned = TOOLS_BIN / name
    if pinned.is_file():
        return str(pinned)
    found = shutil.which(name)
    if found is None:
        raise RuntimeError(f"{name} not found in {TOOLS_BIN} or PATH: run `make tools`")
    return found


def wait_until(
    predicate: Callable[[], bool], timeout: float, what: str, interval: float = 1.0
) -> None:
    """``support.wait.wait_until`` polling once a second: each check is an API request."""
    poll(predicate, timeout, what, interval)


def unique_name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:6]}"


def create_restricted_namespace(cluster: Cluster, prefix: str) -> str:
    """A fresh namespace that enforces Pod Security "restricted"."""
    name = unique_name(prefix)[:63]
    body = client.V1Namespace(
        metadata=client.V1ObjectMeta(name=name, labels=dict(RESTRICTED_LABELS))
    )
    cluster.core.create_namespace(body)
    wait_until(
        lambda: _has_default_serviceaccount(cluster, name), 60, f"default ServiceAccount in {name}"
    )
    return name


def _has_default_serviceaccount(cluster: Cluster, namespace: str) -> bool:
    try:
        cluster.core.read_namespaced_service_account("default", namespace)
    except ApiException as exc:
        if exc.status == 404:
            return False
        raise
    return True


def delete_namespace(cluster: Cluster, namespace: str) -> None:
    try:
        cluster.core.delete_namespace(namespace, propagation_policy="Background")
    except ApiException as exc:
        if exc.status != 404:
            raise


def run_checked(cmd: list[str], shown: str, timeout: float) -> str:
    """Run a CLI; a non-zero exit raises with its stdout and stderr for the CI log."""
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
    if result.returncode != 0:
        raise AssertionError(
            f"`{shown}` exited {result.returncode}\n"
            f"stdout:\n{result.stdout}\nstderr:\n{result.stderr}"
        )
    return result.stdout


@dataclass(frozen=True)
class Helm:
    """`helm` bound to one kubeconfig and namespace; failures raise with helm's stderr."""

    kubeconfig: Path
    namespace: str
    binary: str = field(default_factory=lambda: tool("helm"))

    def run(self, *args: str, timeout: float = 900) -> str:
        cmd = [
            self.binary,
            "--kubeconfig",
            str(self.kubeconfig),
            "--namespace",
            self.namespace,
            *args,
        ]
        return run_checked(cmd, f"helm {' '.join(args)}", timeout)

    def install(
        self,
        release: str,
        chart: Path,
        values: list[Path] | None = None,
        set_values: dict[str, str] | None = None,
        timeout: str = "10m",
    ) -> str:
        args = ["install", release, str(chart), "--wait", "--timeout", timeout]
        for path in values or []:
            args += ["--values", str(path)]
        for key, value in (set_values or {}).items():
            args += ["--set", f"{key}={value}"]
        return self.run(*args)

    def test(self, release: str, timeout: str = "5m") -> str:
        return self.run("test", release, "--logs", "--timeout", timeout)

    def uninstall(self, release: str) -> str:
        return self.run("uninstall", release, "--wait")


def restricted_pod(name: str, image: str, command: list[str], user: int = 65534) -> client.V1Pod:
    """A one-shot pod that passes Pod Security "restricted"."""
    security = client.V1SecurityContext(
        allow_privilege_escalation=False,
        run_as_non_root=True,
        run_as_user=user,
        capabilities=client.V1Capabilities(drop=["ALL"]),
        seccomp_profile=client.V1SeccompProfile(type="RuntimeDefault"),
    )
    container = client.V1Container(
        name="main",
        image=image,
        image_pull_policy=images.PULL_POLICY,
        command=command,
        security_context=security,
    )
    spec = client.V1PodSpec(
        containers=[container], restart_policy="Never", automount_service_account_token=False
    )
    return client.V1Pod(metadata=client.V1ObjectMeta(name=name), spec=spec)


@dataclass(frozen=True)
class PodResult:
    phase: str
    logs: str


def run_pod(cluster: Cluster, namespace: str, pod: client.V1Pod, timeout: float = 120) -> PodResult:
    """Run a one-shot pod to completion and return its phase and logs (pod deleted after)."""
    name = pod.metadata.name
    cluster.core.create_namespaced_pod(namespace, pod)
    try:
        wait_until(
            lambda: _pod_phase(cluster, namespace, name) in ("Succeeded", "Failed"),
            timeout,
            f"pod {namespace}/{name}",
        )
        logs = pod_log(cluster, namespace, name)
        return PodResult(phase=_pod_phase(cluster, namespace, name), logs=logs)
    finally:
        cluster.core.delete_namespaced_pod(name, namespace, grace_period_seconds=0)


def http_get_in_cluster(
    cluster: Cluster, namespace: str, url: str, image: str, attempts: int = 30
) -> PodResult:
    """GET `url` from a pod in `namespace` (so names resolve through cluster DNS).

    Retries once a second: a Service's endpoints reach kube-proxy and DNS a
    moment after its pods turn Ready, so the first try may legitimately miss.
    The image needs busybox's `sh`, `wget` and `sleep` (not `wget -T`: Debian's
    static busybox 1.35 segfaults after a successful GET when a timeout is set).
    """
    script = (
        'n=0; while [ "$n" -lt "$ATTEMPTS" ]; do '
        'wget -O /tmp/body "$URL" && cat /tmp/body && exit 0; '
        "n=$((n + 1)); sleep 1; done; exit 1"
    )
    pod = restricted_pod(unique_name("http-get"), image, ["sh", "-c", script])
    container = pod.spec.containers[0]
    container.env = [
        client.V1EnvVar(name="URL", value=url),
        client.V1EnvVar(name="ATTEMPTS", value=str(attempts)),
    ]
    container.volume_mounts = [client.V1VolumeMount(name="tmp", mount_path="/tmp")]
    pod.spec.volumes = [client.V1Volume(name="tmp", empty_dir=client.V1EmptyDirVolumeSource())]
    return run_pod(cluster, namespace, pod, timeout=attempts * 7 + 60)


def pod_log(
    cluster: Cluster, namespace: str, pod: str, container: str | None = None, previous: bool = False
) -> str:
    """A container's log as text (the client's preloaded form is a bytes repr)."""
    response = cluster.core.read_namespaced_pod_log(
        pod,
        namespace,
        container=container,
        previous=previous,
        tail_lines=LOG_TAIL_LINES,
        _preload_content=False,
    )
    return str(response.data.decode("utf-8", errors="replace"))


def _pod_phase(cluster: Cluster, namespace: str, name: str) -> str:
    return str(cluster.core.read_namespaced_pod(name, namespace).status.phase)


def diagnostics(cluster: Cluster, namespace: str) -> str:
    """Everything needed to debug a failed scenario from a CI log: pods, logs, events."""
    lines = [f"===== diagnostics for namespace {namespace} ====="]
    for pod in cluster.core.list_namespaced_pod(namespace).items:
        lines += _describe_pod(cluster, namespace, pod)
    lines.append(f"----- events in {namespace} (oldest first) -----")
    events = cluster.core.list_namespaced_event(namespace).items
    for event in sorted(events, key=_event_time):
        obj = event.involved_object
        lines.append(
            f"{_event_time(event)} {event.type} {obj.kind}/{obj.name} "
            f"{event.reason}: {event.message}"
        )
    lines.append("----- PVCs -----")
    for pvc in cluster.core.list_namespaced_persistent_volume_claim(namespace).items:
        lines.append(f"{pvc.metadata.name} {pvc.status.phase} class={pvc.spec.storage_class_name}")
    return "\n".join(lines)


def _event_time(event: Any) -> str:
    stamp = event.last_timestamp or event.event_time or event.metadata.creation_timestamp
    return stamp.isoformat() if stamp else ""


def _describe_pod(cluster: Cluster, namespace: str, pod: Any) -> list[str]:
    name = pod.metadata.name
    lines = [
        f"----- pod {name}: phase={pod.status.phase} "
        f"node={pod.spec.node_name} ip={pod.status.pod_ip}"
    ]
    for cond in pod.status.conditions or []:
        lines.append(
            f"  condition {cond.type}={cond.status} "
            f"{cond.reason or ''} {cond.message or ''}".rstrip()
        )
    statuses = (pod.status.init_container_statuses or []) + (pod.status.container_statuses or [])
    for status in statuses:
        lines.append(
            f"  container {status.name}: ready={status.ready} restarts={status.restart_count}"
        )
        lines.append(f"    state={_state(status.state)} last={_state(status.last_state)}")
    containers = (pod.spec.init_containers or []) + pod.spec.containers
    restarted = {s.name for s in statuses if s.restart_count}
    for container in containers:
        lines += _container_logs(cluster, namespace, name, container.name, previous=False)
        if container.name in restarted:
            lines += _container_logs(cluster, namespace, name, container.name, previous=True)
    return lines


def _state(state: Any) -> str:
    if state is None:
        return "-"
    for key in ("running", "waiting", "terminated"):
        detail = getattr(state, key)
        if detail is not None:
            reason = getattr(detail, "reason", None) or ""
            code = getattr(detail, "exit_code", None)
            message = (getattr(detail, "message", None) or "").strip()
            exit_part = "" if code is None else f" exit={code}"
            message_part = f" {message}" if message else ""
            return f"{key}({reason}{exit_part}{message_part})"
    return "-"


def _container_logs(
    cluster: Cluster, namespace: str, pod: str, container: str, previous: bool
) -> list[str]:
    label = f"  logs {pod}/{container}{' (previous)' if previous else ''}:"
    try:
        text = pod_log(cluster, namespace, pod, container, previous=previous)
    except ApiException as exc:
        return [f"{label} unavailable ({exc.status} {exc.reason})"]
    return [label, *("    " + line for line in text.splitlines())]


def kubeconfig_from_env() -> Path:
    """KUBECONFIG as `make e2e` exports it; the local cluster's path otherwise."""
    value = os.environ.get("KUBECONFIG", "")
    return Path(value) if value else REPO_ROOT / ".cache" / "kind" / "kubeconfig"


def kubectl(cluster: Cluster, namespace: str, *args: str, timeout: float = 300) -> str:
    """Run kubectl in `namespace`; failures raise with kubectl's stderr."""
    cmd = [tool("kubectl"), "--kubeconfig", str(cluster.kubeconfig), "-n", namespace, *args]
    return run_checked(cmd, f"kubectl {' '.join(args)}", timeout)


# The command's exit status, printed after its output by the shell that wraps every exec.
EXEC_WRAPPER = (
    '"$@"; status=$?; printf "\\n<<hermes-e2e exec status=%d>>\\n" "$status"; exit "$status"'
)


def exec_in_container(
    cluster: Cluster,
    namespace: str,
    pod: str,
    container: str,
    command: list[str],
    stdin: str = "",
    timeout: float = 600,
    *,
    repeatable: bool = False,
) -> subprocess.CompletedProcess[str]:
    """`kubectl exec` into one container; values travel on stdin, never as arguments.

    Why every command is wrapped in `sh` that prints its exit status last: kubectl exec
    exits 0 with whatever output had arrived when its stream is cut (the error stream
    ends without a status: kubernetes/kubernetes#137404). Twice in CI, under load, a read
    came back "successful" and empty. A missing status line tells a cut stream from a
    command that printed nothing. A cut exec of a `repeatable` command (one that only
    reads) is run again, up to three times; any other fails here, saying so, because
    whether it ran is unknown.

    Why stdin is opened only when there is something to send: without `-i` the command's
    stdin is empty from the start and nothing is closed while it runs.
    """
    interactive = ["-i"] if stdin else []
    cmd = [
        tool("kubectl"),
        "--kubeconfig",
        str(cluster.kubeconfig),
        "-n",
        namespace,
        "exec",
        *interactive,
        pod,
        "-c",
        container,
        "--",
        "sh",
        "-c",
        EXEC_WRAPPER,
        "sh",
        *command,
    ]
    what = f"kubectl exec {namespace}/{pod} -c {container} -- {' '.join(command)[:80]}"
    for attempt in range(1, (TRANSPORT_ATTEMPTS if repeatable else 1) + 1):
        done = subprocess.run(
            cmd,
            input=stdin if stdin else None,
            stdin=None if stdin else subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        if (status := exec_status(done)) is not None:
            return status
        if done.returncode != 0:
            return done  # kubectl's own failure (no such pod, container killed): as it is
        print(f"{what}: stream cut (exit 0, no exit status) on attempt {attempt}")
        if attempt < TRANSPORT_ATTEMPTS and repeatable:
            time.sleep(2)
    raise AssertionError(
        f"{what}: the exec stream was cut {attempt} time(s): kubectl exited 0 without the "
        f"command's exit status (kubernetes/kubernetes#137404)\n"
        f"stdout so far:\n{done.stdout[-2000:]}\nstderr:\n{done.stderr[-2000:]}"
    )


def read_in_container(
    cluster: Cluster, namespace: str, pod: str, container: str, command: list[str]
) -> str:
    """The output of a command that only reads (run again if its exec stream is cut)."""
    done = exec_in_container(cluster, namespace, pod, container, command, repeatable=True)
    assert done.returncode == 0, f"{' '.join(command)[:80]} in {pod} failed: {done.stderr}"
    return done.stdout


def exec_status(done: subprocess.CompletedProcess[str]) -> subprocess.CompletedProcess[str] | None:
    """The command's own result, its status line removed; None if that line never came."""
    match = re.search(r"\n<<hermes-e2e exec status=(\d+)>>\n\Z", done.stdout)
    if match is None:
        return None
    return subprocess.CompletedProcess(
        done.args, int(match.group(1)), done.stdout[: match.start()], done.stderr
    )


def with_transport_retries(what: str, call: Callable[[], httpx.Response]) -> httpx.Response:
    """Retry a single request whose connection dropped before any HTTP answer.

    Why: kubectl port-forward (the harness, not the system under test) now and
    then closes a fresh connection before forwarding it (seen once in ten runs
    as RemoteProtocolError). Any HTTP answer, error or not, is returned as is,
    so a failing system under test still fails; callers that must see every
    dropped request (a load client) do not use this.
    """
    for attempt in range(1, TRANSPORT_ATTEMPTS + 1):
        try:
            return call()
        except httpx.TransportError as exc:
            if attempt == TRANSPORT_ATTEMPTS:
                raise AssertionError(f"{what}: no HTTP answer after {attempt} tries") from exc
            print(f"{what}: {type(exc).__name__}: {exc}; retrying")
            time.sleep(2)
    raise AssertionError("unreachable")


@contextlib.contextmanager
def port_forward(
    cluster: Cluster, namespace: str, resource: str, remote_port: int, timeout: float = 60
) -> Iterator[int]:
    """`kubectl port-forward` to `resource` (e.g. svc/s3) on a free local port.

    Why kubectl and not a client pod: host-side clients (the .venv's
    hermes-runtime, httpx) can then talk to in-cluster servers directly, and the
    forward dies with the block. Yields the local port once kubectl reports it.
    """
    cmd = [
        tool("kubectl"),
        "--kubeconfig",
        str(cluster.kubeconfig),
        "-n",
        namespace,
        "port-forward",
        "--address",
        "127.0.0.1",
        resource,
        f":{remote_port}",
    ]
    process = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        yield _forwarded_port(process, resource, timeout)
    finally:
        process.terminate()
        process.wait(timeout=30)


def _forwarded_port(process: subprocess.Popen[str], resource: str, timeout: float) -> int:
    """Read kubectl's "Forwarding from 127.0.0.1:PORT -> N" line (in a thread: no hang)."""
    found: list[int] = []

    def read() -> None:
        assert process.stdout is not None
        for line in process.stdout:
            match = re.search(r"Forwarding from 127\.0\.0\.1:(\d+)", line)
            if match:
                found.append(int(match.group(1)))
                break

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    reader.join(timeout)
    if not found:
        process.kill()
        stderr = process.stderr.read() if process.stderr else ""
        raise AssertionError(f"kubectl port-forward {resource} did not start: {stderr}")
    return found[0]


def run_job_from_cronjob(
    cluster: Cluster, namespace: str, cronjob: str, timeout: float = 300
) -> str:
    """`kubectl create job --from=cronjob/...` (what an operator does); waits for success."""
    batch = client.BatchV1Api(cluster.api)
    job = unique_name(f"{cronjob[:40]}-now")
    kubectl(cluster, namespace, "create", "job", job, f"--from=cronjob/{cronjob}")

    def finished() -> bool:
        status = batch.read_namespaced_job_status(job, namespace).status
        assert not status.failed, f"job {job} failed: {status.conditions}"
        return bool(status.succeeded)

    wait_until(finished, timeout, f"job {job} to succeed")
    return job


@dataclass(frozen=True)
class Provisioner:
    """A dynamic volume provisioner: its name on PVCs, and where its pods run."""

    name: str = "rancher.io/local-path"
    namespace: str = "local-path-storage"
    selector: str = "app=local-path-provisioner"


PROVISIONER_ANNOTATIONS = (
    "volume.kubernetes.io/storage-provisioner",
    "volume.beta.kubernetes.io/storage-provisioner",
)
SELECTED_NODE = "volume.kubernetes.io/selected-node"
STALL_SECONDS = float(os.environ.get("HERMES_E2E_PROVISIONER_STALL_SECONDS", "90"))


class ProvisionerWatchdog:
    """Deletes a stalled provisioner's pod so the tests' PVCs get their volumes.

    Why: in CI kind's local-path provisioner once stopped provisioning, and every later PVC
    stayed Pending for 12 minutes, until its pod was deleted by hand. A PVC is waiting on the
    provisioner once the scheduler chose its node (or at once for an Immediate class); when
    one of the namespace's PVCs has waited ``stall_seconds`` and the provisioner's pods logged
    nothing in that time (it logs every volume it makes: busy is not stalled), their pods are
    deleted (their Deployment makes new ones) and a line saying so is printed. Runs in a
    daemon thread per test namespace, polling every ``poll_seconds``.
    """

    def __init__(
        self,
        cluster: Cluster,
        namespace: str,
        provisioner: Provisioner | None = None,
        stall_seconds: float = STALL_SECONDS,
        poll_seconds: float = 5.0,
    ) -> None:
        self.cluster = cluster
        self.namespace = namespace
        self.provisioner = provisioner or Provisioner()
        self.stall_seconds = stall_seconds
        self.poll_seconds = poll_seconds
        self.waiting_since: dict[str, float] = {}
        self.restarts: list[str] = []  # the lines printed, one per deletion
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="pvc-watchdog")

    def __enter__(self) -> ProvisionerWatchdog:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=self.poll_seconds + 30)

    def _run(self) -> None:
        while not self._stop.wait(self.poll_seconds):
            try:
                self.check()
            # Never fail the test itself; the API server may be down a while (a node restart).
            except (ApiException, OSError, ValueError, urllib3.exceptions.HTTPError) as exc:
                print(f"provisioner watchdog: check failed: {exc}", flush=True)

    def waiting_claims(self) -> list[str]:
        """PVCs of the namespace that wait on this provisioner now."""
        claims = self.cluster.core.list_namespaced_persistent_volume_claim(self.namespace).items
        storage = client.StorageV1Api(self.cluster.api)
        waiting = []
        for claim in claims:
            notes = claim.metadata.annotations or {}
            if claim.status.phase != "Pending":
                continue
            if self.provisioner.name not in {notes.get(a) for a in PROVISIONER_ANNOTATIONS}:
                continue
            if SELECTED_NODE in notes or _immediate(storage, claim.spec.storage_class_name):
                waiting.append(str(claim.metadata.name))
        return waiting

    def check(self) -> bool:
        """One look; True when it deleted the provisioner's pods."""
        now = time.monotonic()
        waiting = self.waiting_claims()
        self.waiting_since = {c: self.waiting_since.get(c, now) for c in waiting}
        stalled = [
            c for c, since in self.waiting_since.items() if now - since >= self.stall_seconds
        ]
        if not stalled or self._provisioner_logged():
            return False
        pods = self.cluster.core.list_namespaced_pod(
            self.provisioner.namespace, label_selector=self.provisioner.selector
        ).items
        for pod in pods:
            self.cluster.core.delete_namespaced_pod(pod.metadata.name, self.provisioner.namespace)
        line = (
            f"provisioner watchdog: PVC(s) {', '.join(sorted(stalled))} of {self.namespace} "
            f"Pending for {self.stall_seconds:.0f} s while {self.provisioner.name} logged "
            f"nothing: deleted its pod(s) {', '.join(p.metadata.name for p in pods)} in "
            f"{self.provisioner.namespace}"
        )
        print(line, flush=True)
        self.restarts.append(line)
        self.waiting_since = {c: now for c in waiting}  # give the new pod the same time
        return True

    def _provisioner_logged(self) -> bool:
        """Whether any container of the provisioner's pods wrote a log line within the stall
        time."""
        pods = self.cluster.core.list_namespaced_pod(
            self.provisioner.namespace, label_selector=self.provisioner.selector
        ).items
        for pod in pods:
            if pod.status.phase != "Running":
                return True  # starting or stopping: not the stall this is for
            for container in pod.spec.containers:
                response = self.cluster.core.read_namespaced_pod_log(
                    pod.metadata.name,
                    self.provisioner.namespace,
                    container=container.name,
                    since_seconds=max(1, int(self.stall_seconds)),
                    _preload_content=False,
                )
                if response.data.strip():
                    return True
        return False


def _immediate(storage: client.StorageV1Api, class_name: str | None) -> bool:
    """Whether the StorageClass binds at once (no node to wait for)."""
    if not class_name:
        return False
    try:
        found = storage.read_storage_class(class_name)
    except ApiException:
        return False
    return found.volume_binding_mode in (None, "Immediate")
