"""A node restart under chat load (issue 30): every container at once, the volume stays.

The kind node is a podman container: `podman stop -t 0` then `podman start` is a power cut and
a boot (no container gets a stop signal; the node's tmpfs mounts, the in-memory volumes among
them, are gone; its disks stay; podman may give it a new address, which kind's entrypoint
takes in). The kubelet then starts every pod's containers again, the agent's and the load
pod's included, on the same data volume.

Checks, as in the fault suite (tests/e2e/faults_testlib.py): both chat clients are answered
again without a hand; every turn answered (HTTP 200) before or after is in LCM exactly once;
`integrity_check` is ok on lcm.db, state.db and idempotency.db; LCM's full-text index mends
(`lcm grep` finds the last turn answered before the cut). The times (cut -> API server ->
agent Ready -> answered) and the failed requests are printed, never asserted.

It restarts the node every other test runs on, so it is marked `node_restart` and run alone,
after the parallel e2e tier (Makefile `e2e`), and only against the local kind cluster: it
needs the node's container, which a user's own cluster does not have.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from pathlib import Path

import pytest
from support.chat_load import fault_figures

from . import faults_testlib as lib
from . import images, kube
from .test_faults import IMAGES, SETTLE, SYNC_GRACE, VALUES
from .test_scenario_conversation import BACKENDS_CHART, CHART, CI_VALUES, RELEASE, agent_exec

KIND_CLUSTER = "hermes"  # ci/kind-config.yaml
NODE_LABEL = f"io.x-k8s.kind.cluster={KIND_CLUSTER}"


def node_container() -> str:
    """The kind node's podman container; fails naming what is missing (never skips)."""
    podman = shutil.which("podman")
    assert podman, "a node restart needs podman (the kind provider, ci/kind/up.sh) on PATH"
    listed = subprocess.run(
        [podman, "ps", "--filter", f"label={NODE_LABEL}", "--format", "{{.Names}}"],
        capture_output=True,
        text=True,
        check=True,
    )
    names = listed.stdout.split()
    assert len(names) == 1, (
        f"a node restart needs the local kind cluster's one node (podman label {NODE_LABEL}), "
        f"found {names}: run it against `make cluster`, not a cluster of your own"
    )
    return names[0]


def restart_node(name: str) -> None:
    """A power cut and a boot: no stop signal to anything inside."""
    podman = shutil.which("podman") or "podman"
    subprocess.run([podman, "stop", "-t", "0", name], check=True, capture_output=True)
    subprocess.run([podman, "start", name], check=True, capture_output=True)


def api_answers(cluster: kube.Cluster) -> bool:
    try:
        cluster.core.list_namespace(limit=1, _request_timeout=5)
    except Exception:  # the API server is still starting (refused, reset, TLS, 5xx)
        return False
    return True


def pod_ready_again(cluster: kube.Cluster, namespace: str, **query: str) -> bool:
    """One pod (``query``: a label or field selector), its containers restarted by the kubelet
    since the cut, Ready."""
    try:
        pods = cluster.core.list_namespaced_pod(namespace, **query).items
    except Exception:
        return False
    if len(pods) != 1:
        return False
    status = pods[0].status
    restarted = any(s.restart_count for s in status.container_statuses or [])
    ready = any(c.type == "Ready" and c.status == "True" for c in status.conditions or [])
    return restarted and ready


def last_answered_marker(found: lib.Records) -> str:
    answered = [a for a in found.attempts if a.ok]
    return max(answered, key=lambda a: a.started + a.total_s).marker


@pytest.mark.node_restart
@pytest.mark.timeout(1200)
def test_a_node_restart_loses_nothing_and_the_agent_serves_again(
    cluster: kube.Cluster, namespace: str, helm: kube.Helm, tmp_path: Path
) -> None:
    node = node_container()
    images.require(IMAGES)
    backends = {
        "fakeLlm.image": images.ref("fake-llm"),
        "gitServer.image": images.ref("git-server"),
    }
    helm.install("backends", BACKENDS_CHART, set_values=backends, timeout="3m")
    values = tmp_path / "node-restart.yaml"
    values.write_text(json.dumps(VALUES))
    helm.install(RELEASE, CHART, values=[CI_VALUES, values], timeout="5m")
    lib.start_load(cluster, namespace, restartable=True)
    lib.wait_answered(cluster, namespace, 0.0)
    time.sleep(5)  # turns in flight when the power goes
    before = lib.records(cluster, namespace)
    marker = last_answered_marker(before)

    cut = time.time()
    restart_node(node)
    kube.wait_until(lambda: api_answers(cluster), 300, "the API server after the node restart")
    api_back = time.time()
    agent = f"app.kubernetes.io/instance={RELEASE},app.kubernetes.io/component=agent"
    kube.wait_until(
        lambda: pod_ready_again(cluster, namespace, label_selector=agent), 600, "agent pod Ready"
    )
    agent_ready = time.time()
    load = f"metadata.name={lib.LOAD_POD}"
    kube.wait_until(
        lambda: pod_ready_again(cluster, namespace, field_selector=load), 300, "load pod restarted"
    )
    # The restarted load's clients are C and D (chat_load --starts-file).
    found = _wait_answered_by(cluster, namespace, {"C", "D"}, cut, 300)
    answered = time.time()
    end = time.time() + SETTLE
    time.sleep(SETTLE)
    found = lib.records(cluster, namespace)
    checked = lib.check_data(cluster, namespace, found, end - SYNC_GRACE)
    # The full-text index (lcm.db's companion file) mended: a turn of before the cut is found.
    grep = agent_exec(cluster, namespace, ["hermes-runtime", "lcm", "grep", "--json", marker])
    number = marker.strip("[]").split(":")[1]
    snippets = [hit["snippet"] for hit in json.loads(grep)["results"]]
    assert any(number in s for s in snippets), f"lcm grep does not find {marker}: {snippets}"
    figures = fault_figures(found.attempts, found.health, cut, end)
    print(
        f"\nnode restart: API server {api_back - cut:.1f} s, "
        f"agent Ready {agent_ready - cut:.1f} s, "
        f"answered {answered - cut:.1f} s after the cut; failed requests "
        f"{figures.failed_requests} ({figures.turns_hit} turns); LCM checked {checked.checked} "
        f"turns; lcm grep found {marker}"
    )
    assert checked.checked > 0


def _wait_answered_by(
    cluster: kube.Cluster, namespace: str, clients: set[str], moment: float, timeout: float
) -> lib.Records:
    """Records once each of ``clients`` had a turn answered that it started after ``moment``."""
    found: list[lib.Records] = []

    def answered() -> bool:
        found[:] = [lib.records(cluster, namespace)]
        return found[0].answered_after(moment) >= clients

    kube.wait_until(answered, timeout, f"clients {sorted(clients)} answered", interval=2)
    return found[0]
