"""An upgrade with a way back (issue 29): from an earlier release to this tree, and back.

The earlier release is this repository at a fixed commit (ci/images/agent-previous.commit):
its chart and its agent image (built from that commit by ci/build-images.sh, `agent-previous`).
LCM's schema there is 3; this tree's is 4 (the full-text index moved out of `lcm.db`), and a
version refuses a schema newer than its own. So:

1. install the earlier release, hold a conversation;
2. `helm upgrade` to this tree: the pre-upgrade hook backs up first (a labelled snapshot), the
   new agent migrates the schema, the conversation is found;
3. `helm rollback` alone would give a pod that refuses the migrated database; the runbook of
   docs/backup.md ("Upgrades and rollbacks"), run as written, restores the pre-upgrade snapshot
   and rolls back: the earlier agent starts, finds the conversation, and what was said after
   the upgrade is gone with the migrated data (as the runbook says).
"""

from __future__ import annotations

import json
import re
import subprocess
import uuid
from pathlib import Path

import pytest

from . import images, kube
from .test_scenario_conversation import agent_exec, chat, lcm_json

CHART = kube.REPO_ROOT / "charts" / "hermes-agent"
CI_VALUES = images.ci_values()
BACKENDS_CHART = Path(__file__).parent / "charts" / "ci-backends"
RUNBOOK = kube.REPO_ROOT / "docs" / "backup.md"
PREVIOUS = (kube.REPO_ROOT / "ci" / "images" / "agent-previous.commit").read_text().strip()
IMAGES = ["agent", "agent-previous", "fake-llm", "git-server"]
RELEASE = "hermes"  # what the conversation helpers look for
FULLNAME = f"{RELEASE}-hermes-agent"
AGENT = f"app.kubernetes.io/instance={RELEASE},app.kubernetes.io/component=agent"


def previous_release(tmp_path: Path) -> tuple[Path, Path]:
    """The earlier commit's chart and ci.yaml, from this repository's history."""
    root = tmp_path / "previous"
    root.mkdir()
    archive = subprocess.run(
        ["git", "-C", str(kube.REPO_ROOT), "archive", PREVIOUS, "charts", "values-examples"],
        capture_output=True,
        check=False,
    )
    assert archive.returncode == 0, f"git archive {PREVIOUS}: {archive.stderr.decode()}"
    subprocess.run(["tar", "-x", "-C", str(root)], input=archive.stdout, check=True)
    image = {
        "image": {
            "registry": images.REGISTRY,
            "repository": images.repository("agent-previous"),
            "tag": images.tag_of("agent-previous"),
            "pullPolicy": images.PULL_POLICY,
        }
    }
    values = tmp_path / "previous-image.json"
    values.write_text(json.dumps(image))
    return root / "charts" / "hermes-agent", values


def runbook_block() -> str:
    text = RUNBOOK.read_text()
    start = text.index("## Upgrades and rollbacks")
    section = text[start : text.index("\n## ", start + 1)]
    (block,) = re.findall(r"```sh\n(.*?)```", section, re.DOTALL)
    return str(block)


def agent_image(cluster: kube.Cluster, namespace: str) -> str:
    deploy = cluster.apps.read_namespaced_deployment(FULLNAME, namespace)
    (agent,) = [c for c in deploy.spec.template.spec.containers if c.name == "agent"]
    return str(agent.image)


def found(cluster: kube.Cluster, namespace: str, word: str) -> bool:
    return bool(lcm_json(cluster, namespace, "grep", word)["results"])


def schema_version(cluster: kube.Cluster, namespace: str) -> int:
    read = (
        "import apsw; db = apsw.Connection('/opt/data/lcm.db', flags=apsw.SQLITE_OPEN_READONLY)"
        "; print(db.execute('PRAGMA user_version').fetchone()[0])"
    )
    return int(agent_exec(cluster, namespace, ["python3", "-c", read], repeatable=True))


def run_as_a_reader(cluster: kube.Cluster, script: str) -> str:
    """The runbook's block in bash, from the checkout, with helm and kubectl on PATH."""
    env = {
        "PATH": f"{kube.TOOLS_BIN}:/usr/local/bin:/usr/bin:/bin",
        "HOME": str(Path.home()),
        "KUBECONFIG": str(cluster.kubeconfig),
    }
    done = subprocess.run(
        ["bash", "-c", "set -euo pipefail\n" + script],
        cwd=kube.REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=1200,
        check=False,
    )
    output = f"$ {script}\n{done.stdout}{done.stderr}"
    print(output)
    assert done.returncode == 0, f"the rollback runbook exited {done.returncode}:\n{output}"
    return output


@pytest.mark.timeout(1500)
def test_upgrade_migrates_and_the_runbook_rolls_back_onto_the_pre_upgrade_snapshot(
    cluster: kube.Cluster, namespace: str, helm: kube.Helm, tmp_path: Path
) -> None:
    images.require(IMAGES)
    helm.install("backends", BACKENDS_CHART, timeout="3m")
    old_chart, old_image = previous_release(tmp_path)
    old_values = old_chart.parents[1] / "values-examples" / "ci.yaml"
    helm.install(RELEASE, old_chart, values=[old_values, old_image], timeout="8m")
    session = f"upgrade-{uuid.uuid4().hex[:8]}"
    before = f"before-{uuid.uuid4().hex[:10]}"
    chat(cluster, namespace, session, [f"Remember {before} please."])
    assert found(cluster, namespace, before)

    # 2. The upgrade: backed up first, migrated, the conversation still there.
    assert schema_version(cluster, namespace) == 3
    # The earlier chart made the restic password Secret itself (no secrets Job, so no mark):
    # this tree's Job refuses it unless adopted on purpose, as the CHANGELOG tells operators.
    adopt = f"secretsJob.adoptExisting={{{FULLNAME}-backup-password}}"
    upgrade = ["upgrade", RELEASE, str(CHART), "--values", str(CI_VALUES), "--set", adopt]
    helm.run(*upgrade, "--wait", "--timeout", "10m")
    log = kube.kubectl(cluster, namespace, "logs", f"job/{FULLNAME}-pre-upgrade")
    assert '"event": "backup.create.finished"' in log, log[-3000:]
    assert agent_image(cluster, namespace).endswith(f"/hermes-runtime/agent:{images.AGENT_TAG}")
    assert found(cluster, namespace, before)
    assert schema_version(cluster, namespace) == 4  # migrated on the first start
    after = f"after-{uuid.uuid4().hex[:10]}"
    chat(cluster, namespace, session, [f"And now {after}."])
    assert found(cluster, namespace, after)

    # 3. The way back, as the runbook says.
    script = runbook_block().replace("NS=hermes", f"NS={namespace}", 1)
    assert script != runbook_block(), "no NS= in the runbook's block"
    output = run_as_a_reader(cluster, script)
    assert "restoring the pre-upgrade snapshot" in output, output
    assert agent_image(cluster, namespace).endswith("/hermes-runtime/agent-previous:dev")
    assert found(cluster, namespace, before)
    assert not found(cluster, namespace, after)  # said after the upgrade: gone with it
    assert schema_version(cluster, namespace) == 3
    reply = chat(cluster, namespace, session, ["Back again?"])
    assert reply and reply[-1], reply
