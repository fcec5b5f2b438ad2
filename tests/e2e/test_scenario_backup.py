"""Scenario 4: backup under load to S3, verify, restore into a new release.

While a client keeps chatting with the agent, a Job created from the chart's
backup CronJob writes a snapshot into a restic repository on SeaweedFS (S3) in
the same namespace, with the password from the Secret the chart generated;
`backup list` and `backup verify` (the .venv's CLI through a port-forward)
find it and pass, and plain `restic dump` reads our manifest out of it (the
repository needs nothing of ours). A second release with `restore.fromSnapshot`
(`latest`) and `backup.repository.existingSecret` naming the first release's password
Secret then starts from that snapshot: its databases hold exactly the row
counts the manifest recorded, and a chat continuing the pre-backup session
reaches the LLM with the pre-backup message in its history, i.e. the agent
answers from restored history.
"""

from __future__ import annotations

import base64
import json
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
from ruamel.yaml import YAML
from support.restic import pinned_restic

from . import images, kube

CHART = kube.REPO_ROOT / "charts" / "hermes-agent"
CI_VALUES = images.ci_values()  # values-examples/ci.yaml, pulling from the registry
BACKENDS_CHART = Path(__file__).parent / "charts" / "ci-backends"
S3_CHART = Path(__file__).parent / "charts" / "s3-backend"
HERMES_RUNTIME = Path(sys.executable).parent / "hermes-runtime"
IMAGES = [
    "agent",
    "fake-llm",
    "git-server",
    "seaweedfs",
]
SOURCE = "hermes"
RESTORED = "restored"
# What tests/e2e/charts/s3-backend creates (its values.yaml).
BUCKET = "backups"
PREFIX = "hermes"
S3_SECRET = "s3-credentials"
TARGET = f"s3://{BUCKET}/{PREFIX}"
API_PORT = 8642
CHAT_TIMEOUT = 120.0
# Reads every ordinary table's row count the way the backup records them.
COUNT_ROWS = """
import json, sys, apsw
out = {}
for path in sys.argv[1:]:
    db = apsw.Connection("/opt/data/" + path, flags=apsw.SQLITE_OPEN_READONLY)
    names = [r[0] for r in db.execute(
        "SELECT name FROM sqlite_schema WHERE type = 'table' AND sql NOT LIKE 'CREATE VIRTUAL%'"
    )]
    out[path] = {n: db.execute(f'SELECT count(*) FROM "{n}"').fetchone()[0] for n in names}
print(json.dumps(out))
"""


def s3_values(
    tmp_path: Path, restore_from: str = "", password_secret: str = "", from_agent: str = ""
) -> Path:
    """Overrides of ci.yaml: S3 target in the namespace, no plugins (no git-sync image).

    ``password_secret``: an existing Secret with the repository password (a new release
    restoring an old one's backups needs the old password); ``from_agent``: the old release's
    agent name (``<namespace>.<release>``), whose snapshots it restores.
    """
    values: dict[str, Any] = {
        "plugins": [],
        "backup": {
            "enabled": True,
            "mode": "cronjob",
            "target": {
                "type": "s3",
                "s3": {
                    "bucket": BUCKET,
                    "prefix": PREFIX,
                    "endpoint": "http://s3:8333",
                    "region": "us-east-1",
                    "existingSecret": S3_SECRET,
                },
            },
            "repository": {"existingSecret": password_secret},
        },
        "restore": {"fromSnapshot": restore_from, "fromAgent": from_agent},
        "tests": {"enabled": False},
        **images.agent_values(),  # the agent image from HERMES_E2E_REGISTRY (with restic)
    }
    path = tmp_path / f"s3-values-{restore_from or 'source'}.yaml"
    with path.open("w") as handle:
        YAML().dump(values, handle)
    return path


def selector(release: str, component: str) -> str:
    return f"app.kubernetes.io/instance={release},app.kubernetes.io/component={component}"


def only_item(items: list[Any], what: str) -> Any:
    assert len(items) == 1, f"expected one {what}, found {[i.metadata.name for i in items]}"
    return items[0]


def agent_service(cluster: kube.Cluster, namespace: str, release: str) -> str:
    services = cluster.core.list_namespaced_service(
        namespace, label_selector=selector(release, "agent")
    ).items
    return str(only_item(services, f"agent Service of {release}").metadata.name)


def agent_pod(cluster: kube.Cluster, namespace: str, release: str) -> str:
    pods = cluster.core.list_namespaced_pod(
        namespace, label_selector=selector(release, "agent")
    ).items
    running = [p for p in pods if p.metadata.deletion_timestamp is None]
    return str(only_item(running, f"agent pod of {release}").metadata.name)


def release_secret(cluster: kube.Cluster, namespace: str, release: str, key: str) -> Any:
    """The one chart-made Secret of ``release`` that holds ``key``."""
    secrets = cluster.core.list_namespaced_secret(
        namespace, label_selector=f"app.kubernetes.io/instance={release}"
    ).items
    found = [s for s in secrets if s.data and key in s.data]
    assert len(found) == 1, f"expected one Secret of {release} with key {key}"
    return found[0]


def api_key(cluster: kube.Cluster, namespace: str, release: str) -> str:
    """The key from the chart-made Secret (what a real client would be given)."""
    secret = release_secret(cluster, namespace, release, "api-key")
    return base64.b64decode(secret.data["api-key"]).decode()


def chat(base: str, key: str, text: str, session: str | None = None) -> httpx.Response:
    headers = {"Authorization": f"Bearer {key}"}
    if session:
        headers["X-Hermes-Session-Id"] = session
    body = {"model": "fake-model", "messages": [{"role": "user", "content": text}]}
    return httpx.post(
        f"{base}/v1/chat/completions", json=body, headers=headers, timeout=CHAT_TIMEOUT
    )


def reply_text(response: httpx.Response) -> str:
    assert response.status_code == 200, f"chat failed: {response.status_code} {response.text}"
    return str(response.json()["choices"][0]["message"]["content"])


@dataclass
class ChatLoad:
    """A client that keeps chatting in the background; records every outcome."""

    base: str
    key: str
    stop: threading.Event = field(default_factory=threading.Event)
    done: list[tuple[float, int]] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    def run(self) -> None:
        n = 0
        while not self.stop.is_set():
            n += 1
            try:
                response = chat(self.base, self.key, f"load message {n}")
                self.done.append((time.monotonic(), response.status_code))
                if response.status_code != 200:
                    self.errors.append(f"{response.status_code} {response.text[:300]}")
            except httpx.HTTPError as exc:
                self.errors.append(f"{type(exc).__name__}: {exc}")


@pytest.fixture
def chat_load() -> Iterator[list[ChatLoad]]:
    """Holder for the load; the thread is always stopped, even when the test fails."""
    loads: list[ChatLoad] = []
    yield loads
    for load in loads:
        load.stop.set()


def start_load(loads: list[ChatLoad], base: str, key: str) -> threading.Thread:
    load = ChatLoad(base=base, key=key)
    loads.append(load)
    thread = threading.Thread(target=load.run, name="chat-load", daemon=True)
    thread.start()
    return thread


def run_backup_job(cluster: kube.Cluster, namespace: str) -> str:
    """A backup now, from the release's CronJob (what an operator does)."""
    # By the chart's name: the verify CronJob carries the backup component's labels too.
    return kube.run_job_from_cronjob(cluster, namespace, f"{SOURCE}-hermes-agent-backup")


@dataclass(frozen=True)
class S3Access:
    """The in-namespace S3 server as the host sees it: a forwarded port + credentials,
    and the restic repository password (from the source release's generated Secret)."""

    port: int
    access_key: str
    secret_key: str
    password: str = field(repr=False)
    agent: str = ""  # the release's agent name, as the chart passes it (<namespace>.<release>)

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"


def s3_access(
    cluster: kube.Cluster, namespace: str, port: int, password: str, release: str = SOURCE
) -> S3Access:
    """Credentials from the s3-backend chart's Secret (the one the backup job uses), for the
    agent of ``release``."""
    data = cluster.core.read_namespaced_secret(S3_SECRET, namespace).data
    decoded = {k: base64.b64decode(v).decode() for k, v in data.items()}
    keys = decoded["AWS_ACCESS_KEY_ID"], decoded["AWS_SECRET_ACCESS_KEY"]
    return S3Access(port, *keys, password, agent=f"{namespace}.{release}")


def _env(s3: S3Access) -> dict[str, str]:
    """Credentials and the password only in the environment, never in argv."""
    return {
        "PATH": "/usr/bin:/bin",
        "HOME": str(Path.home()),
        "AWS_ACCESS_KEY_ID": s3.access_key,
        "AWS_SECRET_ACCESS_KEY": s3.secret_key,
        "AWS_REGION": "us-east-1",
        "RESTIC_PASSWORD": s3.password,
        "HERMES_RUNTIME_AGENT": s3.agent,
        "HERMES_RUNTIME_RESTIC": str(pinned_restic()),
    }


def backup_cli(s3: S3Access, *args: str) -> subprocess.CompletedProcess[str]:
    """The .venv's `hermes-runtime backup ...` on the pinned restic."""
    cmd = [str(HERMES_RUNTIME), "backup", *args, "--target", TARGET, "--s3-endpoint", s3.endpoint]
    return subprocess.run(
        cmd, capture_output=True, text=True, env=_env(s3), timeout=300, check=False
    )


def read_manifest(s3: S3Access, snapshot: str) -> dict[str, Any]:
    """Our manifest inside the snapshot, read with plain restic (no hermes-runtime involved)."""
    repository = f"s3:{s3.endpoint}/{BUCKET}/{PREFIX}"
    cmd = [str(pinned_restic()), "-r", repository, "-o", "s3.bucket-lookup=path"]
    cmd += ["dump", snapshot, "/.hermes-backup/manifest.json"]
    done = subprocess.run(
        cmd, capture_output=True, text=True, env=_env(s3), timeout=300, check=False
    )
    assert done.returncode == 0, f"restic dump of the manifest failed: {done.stderr}"
    manifest: dict[str, Any] = json.loads(done.stdout)
    return manifest


def settled(counts: dict[str, dict[str, int]]) -> dict[str, dict[str, int]]:
    """Row counts that the restored agent's own work cannot change before they are read.

    The restored agent starts as soon as the restore is done, and its background workers move
    on from the snapshot at once (seen in CI): the embedding worker embeds what was queued (an
    item leaves ``embed_queue`` for ``embeddings``: their sum stays) and the full-text indexer
    indexes what was not yet (``lcm-fts.db`` is derived from ``lcm.db`` and rebuilt from it)."""
    out = {path: dict(tables) for path, tables in counts.items() if path != "lcm-fts.db"}
    lcm = out.get("lcm.db", {})
    if "embeddings" in lcm or "embed_queue" in lcm:
        lcm["embedded_or_queued"] = lcm.pop("embeddings", 0) + lcm.pop("embed_queue", 0)
    return out


def restored_row_counts(
    cluster: kube.Cluster, namespace: str, pod: str, paths: list[str]
) -> dict[str, dict[str, int]]:
    command = ["python", "-c", COUNT_ROWS, *paths]
    counts: dict[str, dict[str, int]] = json.loads(
        kube.read_in_container(cluster, namespace, pod, "agent", command)
    )
    return counts


def snapshot_and_verify(s3: S3Access) -> tuple[str, dict[str, Any]]:
    """`backup list --json` shows exactly the job's snapshot; `verify` passes; its id and
    manifest."""
    listed = backup_cli(s3, "list", "--json")
    assert listed.returncode == 0, f"backup list failed: {listed.stderr}"
    snapshots = json.loads(listed.stdout)
    assert len(snapshots) == 1, f"expected the job's one snapshot in {TARGET}: {snapshots}"
    snapshot = snapshots[0]["id"]
    assert snapshots[0]["status"] == "ok", f"snapshot {snapshot} listed as {snapshots[0]}"
    verified = backup_cli(s3, "verify", "--snapshot", snapshot, "--json")
    assert verified.returncode == 0, f"backup verify {snapshot} failed: {verified.stderr}"
    report = json.loads(verified.stdout)
    assert report["problems"] == [] and report["databases"] >= 2, report
    return snapshot, read_manifest(s3, snapshot)


def back_up_under_load(
    cluster: kube.Cluster, namespace: str, loads: list[ChatLoad], session: str, marker: str
) -> None:
    """Say `marker` in `session`, then run the backup job while another client chats."""
    service = f"svc/{agent_service(cluster, namespace, SOURCE)}"
    with kube.port_forward(cluster, namespace, service, API_PORT) as port:
        base, key = f"http://127.0.0.1:{port}", api_key(cluster, namespace, SOURCE)
        said = kube.with_transport_retries(
            "marker chat", lambda: chat(base, key, f"please remember {marker}", session)
        )
        assert marker in reply_text(said)
        thread = start_load(loads, base, key)
        started = time.monotonic()
        run_backup_job(cluster, namespace)
        finished = time.monotonic()
        loads[0].stop.set()
        thread.join(CHAT_TIMEOUT)
    load = loads[0]
    assert not load.errors, f"chats failed while the backup ran: {load.errors}"
    during = [t for t, _ in load.done if started <= t <= finished]
    assert during, f"no chat completed while the backup job ran ({len(load.done)} in all)"
    print(f"backup job: {finished - started:.1f}s, {len(during)} chats completed meanwhile")


def answers_from_restored_history(
    cluster: kube.Cluster, namespace: str, session: str, marker: str
) -> None:
    """A new turn in the pre-backup session reaches the LLM with `marker` in its history."""
    question = f"question-{uuid.uuid4().hex}"
    service = f"svc/{agent_service(cluster, namespace, RESTORED)}"
    with kube.port_forward(cluster, namespace, service, API_PORT) as port:
        base, key = f"http://127.0.0.1:{port}", api_key(cluster, namespace, RESTORED)
        answer = kube.with_transport_retries(
            "restored chat", lambda: chat(base, key, question, session)
        )
        assert question in reply_text(answer)
    with kube.port_forward(cluster, namespace, "svc/fake-llm", 8080) as llm_port:
        url = f"http://127.0.0.1:{llm_port}/_requests"
        requests = kube.with_transport_retries(
            "fake LLM", lambda: httpx.get(url, timeout=30)
        ).json()
    asked = [json.dumps(r) for r in requests if question in json.dumps(r)]
    assert asked, f"the LLM never received {question}"
    assert any(marker in r for r in asked), (
        f"the restored agent sent {question} without the pre-backup history ({marker})"
    )


@pytest.mark.timeout(1500)
def test_backup_under_load_to_s3_then_restore_into_a_new_release(
    cluster: kube.Cluster,
    namespace: str,
    helm: kube.Helm,
    tmp_path: Path,
    chat_load: list[ChatLoad],
) -> None:
    images.require(IMAGES)
    helm.install("backends", BACKENDS_CHART, timeout="3m")
    helm.install("s3", S3_CHART, timeout="3m")
    helm.install(SOURCE, CHART, values=[CI_VALUES, s3_values(tmp_path)], timeout="5m")

    marker = f"marker-{uuid.uuid4().hex}"
    session = f"e2e-backup-{uuid.uuid4().hex[:8]}"
    back_up_under_load(cluster, namespace, chat_load, session, marker)

    password_secret = release_secret(cluster, namespace, SOURCE, "RESTIC_PASSWORD")
    password = base64.b64decode(password_secret.data["RESTIC_PASSWORD"]).decode()
    with kube.port_forward(cluster, namespace, "svc/s3", 8333) as s3_port:
        snapshot, manifest = snapshot_and_verify(s3_access(cluster, namespace, s3_port, password))
    databases = {path: db["tables"] for path, db in manifest["databases"].items()}
    assert {"state.db", "lcm.db"} <= databases.keys(), f"databases in manifest: {databases}"
    assert databases["state.db"].get("messages", 0) >= 2, databases["state.db"]
    print(f"snapshot {snapshot} row counts: {json.dumps(databases)}")

    # A new release reads the old repository with the old password (docs/backup.md), from
    # `latest` as the chart's docs suggest: restic's runs start beside the listing there.
    restore_values = s3_values(
        tmp_path,
        restore_from="latest",
        password_secret=password_secret.metadata.name,
        from_agent=f"{namespace}.{SOURCE}",  # the old release's snapshots, not its own
    )
    helm.install(RESTORED, CHART, values=[CI_VALUES, restore_values], timeout="5m")
    pod = agent_pod(cluster, namespace, RESTORED)
    restore_log = kube.pod_log(cluster, namespace, pod, "restore")
    assert f"restored snapshot {snapshot}" in restore_log, restore_log
    assert "backup.restore.by_id" not in restore_log, restore_log
    restored = restored_row_counts(cluster, namespace, pod, sorted(databases))
    assert settled(restored) == settled(databases), (
        f"row counts after restore differ from the manifest's: {restored}"
    )

    answers_from_restored_history(cluster, namespace, session, marker)
