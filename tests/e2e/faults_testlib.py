"""Helpers of the e2e fault suite: the in-cluster load pod, its records, the data checks.

Why the load runs in a pod and not through `kubectl port-forward`: a forward is bound to one
pod and dies with it, so it would measure the harness, not the Service a client uses. The pod
runs tests/support/chat_load.py (the same client bench/agent_faults.py uses) against the
agent's Service and prints one JSON record per chat attempt and per /health change; the test
reads them from the pod's log. Pod and host share the kernel clock (kind), so the records'
wall-clock times line up with the moments the test injected its faults.

The pod also mounts the backup PVC read-only, so `hermes-runtime backup list` runs in it while
the agent pod comes and goes.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kubernetes import client
from support.chat_load import Attempt, HealthChange, parse_records

from . import images, kube
from .test_scenario_conversation import AGENT_SELECTOR, BACKENDS_CHART, RELEASE, agent_exec

LOAD_POD = "fault-load"
LOAD_SCRIPT = Path(__file__).resolve().parents[1] / "support" / "chat_load.py"
# Each load client's think time between an answer and its next turn. Back to back, the two
# clients keep the gateway busy without rest for the whole scenario, and the scenarios running
# beside it share the machine's cores with it (docs/benchmarks.md, "Test tiers"); a turn a
# second each still puts turns through every fault, and /health is probed every 50 ms
# whatever the pause.
LOAD_PAUSE_SECONDS = 1.0
AGENT_UID = 10000  # the chart's podSecurityContext.runAsUser / fsGroup
API_PORT_NAME = "http"

# Runs in the agent container (apsw: the image's SQLite): integrity of the databases, how
# often each marker appears in LCM's user messages (a merged duplicate counts twice), and how
# many answers the gateway's durable Idempotency-Key cache holds (docs/retries.md).
CHECK_DATA = """
import json, sys, apsw
markers = json.load(sys.stdin)
out = {"integrity": {}, "counts": {}}
dbs = {}
for name in ("lcm.db", "state.db", ".hermes-runtime/idempotency.db"):
    dbs[name] = apsw.Connection("/opt/data/" + name, flags=apsw.SQLITE_OPEN_READONLY)
    dbs[name].set_busy_timeout(30000)
    out["integrity"][name] = [row[0] for row in dbs[name].execute("PRAGMA integrity_check")]
lcm = dbs["lcm.db"]
texts = [row[0] or "" for row in lcm.execute(
    "SELECT content FROM messages WHERE role = 'user' AND content LIKE '%fault turn [%'"
)]
joined = "\\n".join(texts)
cache = dbs[".hermes-runtime/idempotency.db"]
out["cached_answers"] = cache.execute("SELECT count(*) FROM answers").fetchone()[0]
out["counts"] = {m: joined.count(m) for m in markers}
# For a marker seen twice: where its copies are, and the roles stored between the first two.
out["copies"] = {}
for m in (m for m, n in out["counts"].items() if n > 1):
    rows = list(lcm.execute(
        "SELECT session_id, seq FROM messages WHERE role = 'user' AND instr(content, ?) > 0"
        " ORDER BY session_id, seq", (m,)
    ))
    between = []
    if len(rows) >= 2 and rows[0][0] == rows[1][0]:
        between = [r[0] for r in lcm.execute(
            "SELECT role FROM messages WHERE session_id = ? AND seq > ? AND seq < ? ORDER BY seq",
            (rows[0][0], rows[0][1], rows[1][1]),
        )]
    out["copies"][m] = {"rows": [[sid, seq] for sid, seq in rows], "between": between}
print(json.dumps(out))
"""


@dataclass(frozen=True)
class Records:
    attempts: list[Attempt]
    health: list[HealthChange]

    def answered_after(self, moment: float) -> set[str]:
        """Clients with an answered attempt that started after ``moment``."""
        return {a.client for a in self.attempts if a.ok and a.started > moment}


def _named(items: list[Any], what: str) -> Any:
    assert len(items) == 1, f"expected one {what}, found {[i.metadata.name for i in items]}"
    return items[0]


def install_backends(helm: kube.Helm) -> None:
    """The in-namespace fake LLM and git server (tests/e2e/charts/ci-backends), from the
    registry's images."""
    helm.install(
        "backends",
        BACKENDS_CHART,
        set_values={
            "fakeLlm.image": images.ref("fake-llm"),
            "gitServer.image": images.ref("git-server"),
        },
        timeout="3m",
    )


def release_secret_with(
    cluster: kube.Cluster, namespace: str, key: str, what: str, release: str = RELEASE
) -> str:
    """The name of the release's one Secret holding ``key`` (API key, backup password)."""
    secrets = cluster.core.list_namespaced_secret(
        namespace, label_selector=f"app.kubernetes.io/instance={release}"
    ).items
    holders = [s for s in secrets if s.data and key in s.data]
    return str(_named(holders, what).metadata.name)


def backup_claim(cluster: kube.Cluster, namespace: str) -> str:
    claims = cluster.core.list_namespaced_persistent_volume_claim(namespace).items
    backups = [c for c in claims if c.metadata.name.endswith("-backup")]
    return str(_named(backups, "backup PVC").metadata.name)


def has_backup_claim(cluster: kube.Cluster, namespace: str) -> bool:
    """Whether the release backs up to a PVC (an S3 target or no backup: no such claim)."""
    claims = cluster.core.list_namespaced_persistent_volume_claim(namespace).items
    return any(c.metadata.name.endswith("-backup") for c in claims)


def api_base_url(cluster: kube.Cluster, namespace: str) -> str:
    services = cluster.core.list_namespaced_service(namespace, label_selector=AGENT_SELECTOR)
    service = _named(services.items, "agent Service")
    (port,) = [p.port for p in service.spec.ports if p.name == API_PORT_NAME]
    return f"http://{service.metadata.name}:{port}"


def load_pod(cluster: kube.Cluster, namespace: str, restartable: bool = False) -> client.V1Pod:
    """The load pod: chat_load.py from a ConfigMap, the key from the chart's Secret; the
    backup PVC and its password when the release backs up to one (`backup list`).

    ``restartable``: restarted when its node restarts (restartPolicy Always), its clients then
    named after the last start's (an emptyDir keeps the count), so no marker is used twice."""
    cluster.core.create_namespaced_config_map(
        namespace,
        client.V1ConfigMap(
            metadata=client.V1ObjectMeta(name=LOAD_POD),
            data={"chat_load.py": LOAD_SCRIPT.read_text()},
        ),
    )
    command = ["python3", "/load/chat_load.py", "--url", api_base_url(cluster, namespace)]
    command += ["--pause", str(LOAD_PAUSE_SECONDS)]
    if restartable:
        command += ["--starts-file", "/state/starts"]
    pod = kube.restricted_pod(LOAD_POD, images.ref("agent"), command, user=AGENT_UID)
    # The backup repository is the backup roles' (UIDs of their own), shared through the
    # release's group, as the chart's pods have it (fsGroup).
    pod.spec.security_context = client.V1PodSecurityContext(fs_group=AGENT_UID)
    container = pod.spec.containers[0]
    key = client.V1SecretKeySelector(
        name=release_secret_with(cluster, namespace, "api-key", "API key Secret"), key="api-key"
    )
    container.env = [
        client.V1EnvVar(
            name="HERMES_API_KEY", value_from=client.V1EnvVarSource(secret_key_ref=key)
        ),
        client.V1EnvVar(name="PYTHONUNBUFFERED", value="1"),
    ]
    container.volume_mounts = [
        *(container.volume_mounts or []),  # /tmp
        client.V1VolumeMount(name="load", mount_path="/load", read_only=True),
    ]
    pod.spec.volumes = [
        *(pod.spec.volumes or []),
        client.V1Volume(name="load", config_map=client.V1ConfigMapVolumeSource(name=LOAD_POD)),
    ]
    if restartable:
        pod.spec.restart_policy = "Always"
        container.volume_mounts.append(client.V1VolumeMount(name="state", mount_path="/state"))
        pod.spec.volumes.append(
            client.V1Volume(name="state", empty_dir=client.V1EmptyDirVolumeSource())
        )
    if has_backup_claim(cluster, namespace):
        mount_backup_claim(cluster, namespace, pod)
    pod.spec.security_context = client.V1PodSecurityContext(
        run_as_user=AGENT_UID, run_as_group=AGENT_UID, fs_group=AGENT_UID
    )
    # The backup PVC is ReadWriteOnce: the pod must run on the agent's node.
    pod.spec.affinity = client.V1Affinity(
        pod_affinity=client.V1PodAffinity(
            required_during_scheduling_ignored_during_execution=[
                client.V1PodAffinityTerm(
                    topology_key="kubernetes.io/hostname",
                    label_selector=client.V1LabelSelector(
                        match_labels=dict(pair.split("=", 1) for pair in AGENT_SELECTOR.split(","))
                    ),
                )
            ]
        )
    )
    return pod


def mount_backup_claim(cluster: kube.Cluster, namespace: str, pod: client.V1Pod) -> None:
    """The backup PVC read-only at /backup, with the repository password: `backup list` of
    the backup volume opens the restic repository."""
    container = pod.spec.containers[0]
    password = client.V1SecretKeySelector(
        name=release_secret_with(cluster, namespace, "RESTIC_PASSWORD", "backup password Secret"),
        key="RESTIC_PASSWORD",
    )
    container.env += [
        client.V1EnvVar(
            name="RESTIC_PASSWORD", value_from=client.V1EnvVarSource(secret_key_ref=password)
        ),
        client.V1EnvVar(name="RESTIC_CACHE_DIR", value="/tmp/restic-cache"),
    ]
    container.volume_mounts.append(
        client.V1VolumeMount(name="backup", mount_path="/backup", read_only=True)
    )
    pod.spec.volumes.append(
        client.V1Volume(
            name="backup",
            persistent_volume_claim=client.V1PersistentVolumeClaimVolumeSource(
                claim_name=backup_claim(cluster, namespace), read_only=True
            ),
        )
    )


def start_load(cluster: kube.Cluster, namespace: str, restartable: bool = False) -> None:
    cluster.core.create_namespaced_pod(namespace, load_pod(cluster, namespace, restartable))
    kube.wait_until(
        lambda: cluster.core.read_namespaced_pod(LOAD_POD, namespace).status.phase == "Running",
        180,
        f"load pod {namespace}/{LOAD_POD} running",
    )


def records(cluster: kube.Cluster, namespace: str) -> Records:
    """Every record the load pod printed so far (the whole log, not a tail), the previous
    container's first when it was restarted (a node restart: ``load_pod(restartable=True)``)."""
    pod = cluster.core.read_namespaced_pod(LOAD_POD, namespace)
    restarted = any(s.restart_count for s in pod.status.container_statuses or [])
    lines = []
    for previous in (True, False) if restarted else (False,):
        response = cluster.core.read_namespaced_pod_log(
            LOAD_POD, namespace, container="main", previous=previous, _preload_content=False
        )
        lines += response.data.decode("utf-8", errors="replace").splitlines()
    phase = cluster.core.read_namespaced_pod(LOAD_POD, namespace).status.phase
    assert phase == "Running", f"the load pod stopped ({phase}):\n" + "\n".join(lines[-50:])
    attempts, health = parse_records(lines)
    return Records(attempts, health)


def wait_answered(
    cluster: kube.Cluster, namespace: str, moment: float, timeout: float = 240
) -> Records:
    """Records once every client had a turn answered that it started after ``moment``."""
    deadline = time.monotonic() + timeout
    while True:
        found = records(cluster, namespace)
        if found.answered_after(moment) >= {"A", "B"}:
            return found
        if time.monotonic() > deadline:
            failures = [a for a in found.attempts if a.started > moment][-5:]
            raise AssertionError(f"no turn answered for {timeout} s; last attempts {failures}")
        time.sleep(2)


@dataclass(frozen=True)
class DataCheck:
    checked: int  # answered turns old enough to be due in LCM
    resent: list[str]  # turns answered twice because the first answer died with the gateway
    missing: list[str] = field(default_factory=list)  # only with tolerate_lost_or_twice
    twice: dict[str, Any] = field(default_factory=dict)  # the same, stored more than once


def check_data(
    cluster: kube.Cluster,
    namespace: str,
    found: Records,
    cutoff: float,
    *,
    tolerate_lost_or_twice: bool = False,
) -> DataCheck:
    """Every answered turn is in LCM exactly once, both databases pass integrity_check.

    ``tolerate_lost_or_twice``: answered turns missing from LCM (``missing``) or stored more
    than once (``twice``) are returned instead of failing here, for a caller that reports
    them its own way; integrity and the idempotency cache are still asserted.

    Turns answered after ``cutoff`` may still wait for their sync (the next turn stores a
    skipped one), so they are only checked for duplicates.

    The clients send every turn with an ``Idempotency-Key`` (the same on each retry), so a
    turn whose first attempt the gateway answered and was killed before the answer left it is
    answered again from the gateway's durable cache, not run twice. One window stays
    (docs/retries.md, "An answer lost with the gateway"): a kill in the milliseconds between
    Hermes writing the reply to ``state.db`` and the cache committing it; the retry then runs
    the turn again, two turns on the server's side, each with its reply. Such a turn is
    recognised by its data, not by timing: two user copies in one session, an assistant reply
    stored between them, and a failed attempt of that turn. It is reported, not failed; every
    other duplicate fails.
    """
    answered = {a.marker: a for a in found.attempts if a.ok}
    out = agent_exec(
        cluster,
        namespace,
        ["python3", "-c", CHECK_DATA],
        stdin=json.dumps(sorted(answered)),
        repeatable=True,
    )
    result = json.loads(out.strip().splitlines()[-1])
    assert all(verdict == ["ok"] for verdict in result["integrity"].values()), result["integrity"]
    # The clients' keys reach a durable cache in the image (answers live 300 s).
    assert result["cached_answers"] > 0, "no answer in the gateway's idempotency cache"
    counts: dict[str, int] = result["counts"]
    cut = {a.marker for a in found.attempts if not a.ok}
    resent = sorted(
        m
        for m, copies in result["copies"].items()
        if counts[m] == 2
        and len(copies["rows"]) == 2
        and "assistant" in copies["between"]
        and m in cut
    )
    duplicated = {
        m: {"count": n, **result["copies"][m]}
        for m, n in counts.items()
        if n > 1 and m not in resent
    }
    due = [m for m, a in answered.items() if a.started + a.total_s < cutoff]
    missing = [m for m in due if counts[m] == 0]
    if tolerate_lost_or_twice:
        return DataCheck(len(due), resent, missing, duplicated)
    assert not duplicated, f"answered turns stored more than once in LCM: {duplicated}"
    assert not missing, f"answered turns missing from LCM: {missing}"
    return DataCheck(len(due), resent)


def listed_snapshots(cluster: kube.Cluster, namespace: str) -> list[dict[str, Any]]:
    """`hermes-runtime backup list --json` of the backup PVC, from the load pod."""
    command = ["hermes-runtime", "backup", "list", "--target", "file:///backup", "--json"]
    command += ["--agent", f"{namespace}.{RELEASE}"]  # the chart's name for the agent
    result = kube.exec_in_container(
        cluster, namespace, LOAD_POD, "main", command, timeout=120, repeatable=True
    )
    assert result.returncode == 0, f"backup list failed: {result.stderr}"
    snapshots: list[dict[str, Any]] = json.loads(result.stdout)
    return snapshots


def serving_pod_name(cluster: kube.Cluster, namespace: str) -> str:
    """The one agent pod not being deleted."""
    pods = cluster.core.list_namespaced_pod(namespace, label_selector=AGENT_SELECTOR).items
    live = [p for p in pods if p.metadata.deletion_timestamp is None]
    return str(_named(live, "live agent pod").metadata.name)


def agent_container_restarts(cluster: kube.Cluster, namespace: str) -> int:
    """How often the kubelet restarted the serving pod's agent container."""
    pod = cluster.core.read_namespaced_pod(serving_pod_name(cluster, namespace), namespace)
    (agent,) = [s for s in pod.status.container_statuses or [] if s.name == "agent"]
    return int(agent.restart_count)
