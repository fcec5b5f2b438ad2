"""Scenario 5: upgrade, uninstall and reinstall keep the agent's data.

`helm upgrade` with changed values (a new SOUL.md seed, an extra env var, new
resource requests) replaces the agent pod but keeps /opt/data: a marker file and
the conversation in Hermes' state.db survive, and the new seed reaches SOUL.md.
`helm uninstall` leaves the data PVC behind (helm.sh/resource-policy: keep), and a
new install under the same release name adopts that PVC: the marker is still there.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import pytest
from kubernetes.client.rest import ApiException

from . import images, kube
from .test_scenario_conversation import (
    AGENT_SELECTOR,
    BACKENDS_CHART,
    CHART,
    CI_VALUES,
    IMAGES,
    RELEASE,
    agent_exec,
    agent_pod,
    chat,
    install_agent,
)

SESSION = "e2e-lifecycle"
MARKER = "/opt/data/lifecycle-marker"
DATA_CLAIM = f"{RELEASE}-hermes-agent-data"
BACKUP_PASSWORD = f"{RELEASE}-hermes-agent-backup-password"
V1: dict[str, Any] = {"hermes": {"soul": "You are the lifecycle agent, soul v1.\n"}}
V2: dict[str, Any] = {
    "hermes": {"soul": "You are the lifecycle agent, soul v2.\n"},
    "agent": {
        "env": [{"name": "LIFECYCLE_RELEASE", "value": "v2"}],
        "resources": {
            "requests": {"cpu": "60m", "memory": "300Mi"},
            "limits": {"memory": "1536Mi"},
        },
    },
}

# Counts the session's messages in Hermes' state.db (read-only; WAL allows a live reader).
COUNT_MESSAGES = """
import sqlite3, sys
db = sqlite3.connect("file:/opt/data/state.db?mode=ro", uri=True)
query = "SELECT count(*) FROM messages WHERE session_id = ?"
print(db.execute(query, (sys.argv[1],)).fetchone()[0])
"""


def stored_messages(cluster: kube.Cluster, namespace: str) -> int:
    out = agent_exec(
        cluster, namespace, ["python3", "-c", COUNT_MESSAGES, SESSION], repeatable=True
    )
    return int(out.strip())


def read_file(cluster: kube.Cluster, namespace: str, path: str) -> str:
    return agent_exec(cluster, namespace, ["cat", path], repeatable=True)


def agent_uid(cluster: kube.Cluster, namespace: str) -> str:
    pod = cluster.core.read_namespaced_pod(agent_pod(cluster, namespace), namespace)
    return str(pod.metadata.uid)


def claim_exists(cluster: kube.Cluster, namespace: str, name: str) -> bool:
    try:
        cluster.core.read_namespaced_persistent_volume_claim(name, namespace)
    except ApiException as exc:
        if exc.status == 404:
            return False
        raise
    return True


def upgrade(helm: kube.Helm, tmp_path: Path, values: dict[str, Any]) -> None:
    extra = tmp_path / "upgrade.yaml"
    extra.write_text(json.dumps(values))
    helm.run(
        "upgrade",
        RELEASE,
        str(CHART),
        "--values",
        str(CI_VALUES),
        "--values",
        str(extra),
        "--wait",
        "--timeout",
        "5m",
    )


def backup_password(cluster: kube.Cluster, namespace: str) -> str:
    """The generated restic repository password (base64, as stored)."""
    secret = cluster.core.read_namespaced_secret(BACKUP_PASSWORD, namespace)
    return str(secret.data["RESTIC_PASSWORD"])


@pytest.mark.timeout(900)
def test_upgrade_uninstall_and_reinstall_keep_the_data(
    cluster: kube.Cluster, namespace: str, helm: kube.Helm, tmp_path: Path
) -> None:
    images.require(IMAGES)
    helm.install("backends", BACKENDS_CHART, timeout="3m")
    install_agent(helm, tmp_path, V1)

    marker = uuid.uuid4().hex
    agent_exec(cluster, namespace, ["sh", "-c", f'printf %s "$1" > {MARKER}', "sh", marker])
    replies = chat(cluster, namespace, SESSION, ["Remember the lighthouse keeper."])
    assert replies == ["Echo: Remember the lighthouse keeper."]
    before = stored_messages(cluster, namespace)
    assert before >= 2, f"the turn is not in state.db (session {SESSION}): {before} messages"
    assert "soul v1" in read_file(cluster, namespace, "/opt/data/SOUL.md")
    first_pod = agent_uid(cluster, namespace)
    password = backup_password(cluster, namespace)

    upgrade(helm, tmp_path, V2)
    assert agent_uid(cluster, namespace) != first_pod, "the upgrade did not replace the pod"
    assert agent_exec(cluster, namespace, ["printenv", "LIFECYCLE_RELEASE"]).strip() == "v2"
    (deployment,) = cluster.apps.list_namespaced_deployment(
        namespace, label_selector=AGENT_SELECTOR
    ).items
    (agent,) = [c for c in deployment.spec.template.spec.containers if c.name == "agent"]
    assert agent.resources.requests == {"cpu": "60m", "memory": "300Mi"}
    assert "soul v2" in read_file(cluster, namespace, "/opt/data/SOUL.md")
    assert read_file(cluster, namespace, MARKER) == marker
    assert stored_messages(cluster, namespace) == before
    assert backup_password(cluster, namespace) == password, "the upgrade changed the password"

    helm.uninstall(RELEASE)
    assert not cluster.apps.list_namespaced_deployment(
        namespace, label_selector=AGENT_SELECTOR
    ).items, "uninstall left the agent Deployment"
    assert claim_exists(cluster, namespace, DATA_CLAIM), "uninstall deleted the data PVC"

    install_agent(helm, tmp_path, V1, name="reinstall.yaml")
    assert read_file(cluster, namespace, MARKER) == marker
    # Losing the restic password loses every backup: uninstall keeps it, reinstall reuses it.
    assert backup_password(cluster, namespace) == password, "the reinstall changed the password"
    assert stored_messages(cluster, namespace) == before
    replies = chat(cluster, namespace, SESSION, ["Who was it?"])
    assert replies == ["Echo: Who was it?"]
