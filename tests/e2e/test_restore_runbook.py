"""The restore runbook of docs/backup.md, followed step by step in a "restricted" namespace.

The commands are read from the runbook itself (its `sh` blocks and the step 3 commands) and run
with bash as written, with two substitutions only: the namespace (`NS=`, the reader's own) and
the snapshot id (the runbook's example id becomes the one the backup Job just wrote). The
release is `hermes` with values-examples/ci.yaml, whose backup target is the runbook's
default, the backup PVC (`TARGET=file:///backup`).

What a reader goes through:
- step 1: the shell pod (docs/restore-pod.yaml) starts under Pod Security "restricted",
  `backup list` shows the snapshot, `backup verify` passes;
- step 2b: a damaged volume (a file changed, a stray file added after the backup) is replaced
  with `restore --force` from the shell pod while the agent is scaled to 0;
- step 2a: the data PVC is lost; `helm upgrade --set restore.fromSnapshot=ID` brings the
  release back with the snapshot restored by the init container;
- step 3: `rollout status` and `helm test` pass, and the backed-up file is back each time.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

from . import images, kube

CHART = kube.REPO_ROOT / "charts" / "hermes-agent"
CI_VALUES = kube.REPO_ROOT / "values-examples" / "ci.yaml"
RUNBOOK = kube.REPO_ROOT / "docs" / "backup.md"
BACKENDS_CHART = Path(__file__).parent / "charts" / "ci-backends"
RELEASE = "hermes"
FULLNAME = f"{RELEASE}-hermes-agent"
EXAMPLE_ID = "3fa2c1d4"  # the snapshot id the runbook's commands show (restic's short form)
SNAPSHOT_ID = re.compile(r"^[0-9a-f]{64}$", re.M)  # `backup create` prints restic's full id last
MARKER = "/opt/data/memories/runbook-marker.md"
STRAY = "/opt/data/stray-after-backup"
AGENT = f"app.kubernetes.io/instance={RELEASE},app.kubernetes.io/component=agent"


@dataclass(frozen=True)
class Runbook:
    """The runbook's commands: the variables block, steps 1, 2a, 2b, and step 3's two."""

    variables: str
    find: str
    fresh_volume: str
    damaged_volume: str
    check: list[str]


def read_runbook() -> Runbook:
    text = RUNBOOK.read_text()
    start = text.index("## Runbook: restoring an agent")
    section = text[start : text.index("\n## ", start + 1)]
    blocks = re.findall(r"```sh\n(.*?)```", section, re.DOTALL)

    def block(marker: str) -> str:
        (found,) = [b for b in blocks if marker in b]
        return str(found)

    step3 = section[section.index("**3. Check the agent.**") :]
    check = [c for c in re.findall(r"`([^`]+)`", step3) if c.split()[0] in ("kubectl", "helm")]
    return Runbook(
        variables=block("REL="),
        find=block("backup verify"),
        fresh_volume=block("restore.fromSnapshot="),
        damaged_volume=block("--force"),
        check=check[:2],
    )


@dataclass(frozen=True)
class Reader:
    """Runs runbook commands in bash as a reader would paste them, from the checkout."""

    cluster: kube.Cluster
    variables: str
    snapshot: str

    def run(self, commands: str, what: str, timeout: float = 600) -> str:
        script = "set -euo pipefail\n" + self.variables + "\n" + commands
        script = script.replace(EXAMPLE_ID, self.snapshot)
        env = {
            "PATH": f"{kube.TOOLS_BIN}:/usr/local/bin:/usr/bin:/bin",
            "HOME": os.environ.get("HOME", "/root"),
            "KUBECONFIG": str(self.cluster.kubeconfig),
        }
        cmd = ["bash", "-c", script]
        result = subprocess.run(
            cmd, cwd=kube.REPO_ROOT, env=env, capture_output=True, text=True, timeout=timeout
        )
        output = f"--- {what} ---\n$ {commands.strip()}\n{result.stdout}{result.stderr}"
        print(output)
        assert result.returncode == 0, f"runbook {what} exited {result.returncode}:\n{output}"
        return result.stdout + result.stderr


def agent_pod(cluster: kube.Cluster, namespace: str) -> str:
    pods = cluster.core.list_namespaced_pod(namespace, label_selector=AGENT).items
    live = [p.metadata.name for p in pods if p.metadata.deletion_timestamp is None]
    assert len(live) == 1, f"expected one agent pod: {live}"
    return str(live[0])


def agent_sh(cluster: kube.Cluster, namespace: str, script: str, stdin: str = "") -> str:
    pod = agent_pod(cluster, namespace)
    done = kube.exec_in_container(cluster, namespace, pod, "agent", ["sh", "-c", script], stdin)
    assert done.returncode == 0, f"`{script}` in {pod}: {done.stderr}"
    return done.stdout


def backup_now(cluster: kube.Cluster, namespace: str) -> str:
    """A Job from the CronJob (what an operator does); the snapshot id its log names."""
    job = kube.run_job_from_cronjob(cluster, namespace, f"{FULLNAME}-backup")
    (pod,) = cluster.core.list_namespaced_pod(namespace, label_selector=f"job-name={job}").items
    containers = [c.name for c in pod.spec.containers]
    log = "".join(kube.pod_log(cluster, namespace, pod.metadata.name, c) for c in containers)
    ids = set(SNAPSHOT_ID.findall(log))
    assert len(ids) == 1, f"expected one snapshot id in the backup log: {ids}\n{log}"
    return ids.pop()


def lose_data_volume(cluster: kube.Cluster, namespace: str) -> None:
    """The disaster of step 2a: the agent's data PVC is gone (the agent is down)."""
    kube.kubectl(cluster, namespace, "scale", f"deploy/{FULLNAME}", "--replicas=0")
    kube.kubectl(cluster, namespace, "wait", "--for=delete", "pod", "-l", AGENT, "--timeout=5m")
    # A finished backup Job's pod still counts as a user of the claim (pvc-protection).
    backup = f"app.kubernetes.io/instance={RELEASE},app.kubernetes.io/component=backup"
    kube.kubectl(cluster, namespace, "delete", "job", "-l", backup, "--wait", timeout=120)
    kube.kubectl(cluster, namespace, "delete", "pvc", f"{FULLNAME}-data", "--wait", timeout=300)
    claims = cluster.core.list_namespaced_persistent_volume_claim(namespace).items
    assert f"{FULLNAME}-data" not in {c.metadata.name for c in claims}


@pytest.mark.timeout(900)
def test_restore_runbook_step_by_step_in_a_restricted_namespace(
    cluster: kube.Cluster, namespace: str, helm: kube.Helm, tmp_path: Path
) -> None:
    images.require(["agent", "fake-llm", "git-server"])
    labels = cluster.core.read_namespace(namespace).metadata.labels
    assert labels["pod-security.kubernetes.io/enforce"] == "restricted", labels
    runbook = read_runbook()
    assert len(runbook.check) == 2, f"step 3's commands: {runbook.check}"

    backends = tmp_path / "backends.yaml"
    servers = {"fakeLlm": {"image": images.ref("fake-llm")}}
    servers["gitServer"] = {"image": images.ref("git-server")}
    backends.write_text(json.dumps(servers))
    helm.install("backends", BACKENDS_CHART, values=[backends], timeout="3m")
    registry = tmp_path / "registry.yaml"  # ci.yaml's registry is the default local one
    registry.write_text(json.dumps({"image": {"registry": images.REGISTRY}}))
    helm.install(RELEASE, CHART, values=[CI_VALUES, registry], timeout="5m")

    content = f"remember {secrets.token_hex(8)}\n"
    agent_sh(cluster, namespace, f"mkdir -p {Path(MARKER).parent} && cat > {MARKER}", content)
    snapshot = backup_now(cluster, namespace)
    # Damage after the backup: a changed file and a stray one.
    agent_sh(cluster, namespace, f"echo damaged > {MARKER} && touch {STRAY}")

    variables = re.sub(r"\bNS=\S+", f"NS={namespace}", runbook.variables, count=1)
    assert variables != runbook.variables, f"no NS= in the runbook's variables:\n{variables}"
    reader = Reader(cluster, variables, snapshot)

    found = reader.run(runbook.find, "step 1: find a good snapshot")
    assert snapshot in found, f"`backup list` does not show {snapshot}"
    shell = cluster.core.read_namespaced_pod(f"{FULLNAME}-restore-shell", namespace)
    image = shell.spec.containers[0].image
    assert image == f"{images.REGISTRY}/{images.repository('agent')}:{images.AGENT_TAG}", image

    reader.run(runbook.damaged_volume, "step 2b: replace a damaged volume")
    reader.run(runbook.check[0], "step 3: rollout status")
    assert agent_sh(cluster, namespace, f"cat {MARKER}") == content, "2b did not restore"
    assert agent_sh(cluster, namespace, f"ls {STRAY} 2>/dev/null || true") == "", "stray file kept"

    lose_data_volume(cluster, namespace)
    restored = reader.run(runbook.fresh_volume, "step 2a: fresh volume")
    assert f"restored snapshot {snapshot}" in restored, (
        "the restore container's log says no restore"
    )
    for command in runbook.check:
        reader.run(command, f"step 3: {command}")
    assert agent_sh(cluster, namespace, f"cat {MARKER}") == content, "2a did not restore"
