"""The compromised agent beside continuous replication and Vault: what its shell cannot reach.

The release runs the way a platform team would run it with both on: ``backup.continuous``
(the ``replicate`` sidecar runs Litestream over every database to the in-namespace S3) and
Vault (OpenBao with Kubernetes auth, two roles: the agent pod's reads the agent's path and
replication's own copy of the S3 keys, the backup pods' alone reads the backup path; the
refresher sidecar keeps the agent pod's token alive). Then, from inside the agent container as
its user, the shell an injected prompt would hold:

- plants traps in the data dir for the backup pod (``test_compromised_agent``'s);
- looks for replicate's Litestream config, which Litestream runs the ``exec:`` of with the S3
  keys in its environment: no process of another UID is visible, no config file is reachable,
  replicate's config folder is absent from the agent's ``/tmp`` (each role has its own);
- plants configs with an ``exec:`` that would write a marker into the data dir, under the very
  name replicate uses (in its own ``/tmp``), under the old shared name, as a link and in the
  data dir, then creates a new database so replicate restarts Litestream on a new config: the
  new database's replica appears in the bucket, replicate's config is still its own (same
  private folder, ``0700``/``0600``, its UID, no ``exec:``), and no marker ever appears;
- looks for the pod's Vault credential (the projected JWT the Vault containers log in with):
  not in any file or environment it can read, no token file; without one Vault refuses it the
  backup path; and even handed the pod's JWT, the backup role refuses the login and the agent
  pod's role is refused the backup path (Vault's policy, not the network, says no);
- and the agent keeps serving: a turn is answered, no container restarted, the next backup
  job succeeds and wrote nothing outside the data dir, and a restore of that snapshot with the
  replicas brings back the new database from its replica, later rows included.
"""

from __future__ import annotations

import base64
import json
import tempfile
import uuid
from pathlib import Path
from typing import Any

import apsw
import boto3
import pytest

from . import images, kube
from .test_compromised_agent import HUNT, OUTSIDE, PLANT, agent_state, in_agent
from .test_scenario_backup import (
    BUCKET,
    CHART,
    CI_VALUES,
    PREFIX,
    S3Access,
    backup_cli,
    release_secret,
    s3_access,
)
from .test_scenario_conversation import chat, lcm_json
from .test_scenario_vault import (
    AGENT_PATH,
    AUTH_PATH,
    BACKUP_PATH,
    BACKUP_ROLE,
    KV_MOUNT,
    RELEASE,
    ROLE,
    VAULT_ADDR,
    install_backends_and_s3,
    install_openbao,
    openbao_token_reviewer,
    s3_values_without_credentials,
    set_up_openbao,
    vault_values,
    write_values,
)

__all__ = ["openbao_token_reviewer"]  # a fixture used below

IMAGES = ["agent", "fake-llm", "git-server", "seaweedfs", "openbao"]
FULLNAME = f"{RELEASE}-hermes-agent"
REPLICATE_PATH = "hermes/replicate"  # replication's own copy of the S3 keys (docs/vault.md)
VAULT_JWT = "/var/run/secrets/hermes-runtime/vault/token"  # in the Vault containers only
REPLICATE_UID = 10002  # backup.continuous.containerSecurityContext
ROWS_BEFORE_BACKUP = 50
ROWS_AFTER_BACKUP = 25

# Run in the replicate container (by the test, as replicate's UID): its Litestream config(s),
# with their permission bits (the setgid bit the fsGroup puts on the emptyDir left out).
REPLICATE_VIEW = """
import glob, json, os, stat
configs = []
for folder in sorted(glob.glob("/tmp/hermes-litestream-*")):
    info = os.lstat(folder)
    entry = {"folder": folder, "folder_mode": oct(info.st_mode & 0o777),
             "folder_uid": info.st_uid}
    path = os.path.join(folder, "litestream.yml")
    if os.path.lexists(path):
        file = os.lstat(path)
        with open(path) as handle:
            config = json.load(handle)
        entry.update(
            path=path, mode=oct(file.st_mode & 0o777), uid=file.st_uid,
            link=stat.S_ISLNK(file.st_mode), keys=sorted(config),
            dbs=[db["path"] for db in config.get("dbs", [])],
            replicas=sorted({db["replica"].get("bucket", "") + "/" + db["replica"]["path"]
                             for db in config.get("dbs", [])}),
        )
    configs.append(entry)
print(json.dumps({"uid": os.getuid(), "configs": configs}))
"""

# The agent's shell looks for replicate: the UIDs of every process it can see, every file or
# folder named like Litestream's config it can read, and replicate's own config path (given
# as argv[1], what the shell would guess) from its side. Prints what it saw.
REACH = """
import json, os, sys
target = sys.argv[1]
uids = set()
for pid in os.listdir("/proc"):
    if pid.isdigit():
        try:
            with open(f"/proc/{pid}/status") as handle:
                uids.update(int(line.split()[1]) for line in handle if line.startswith("Uid:"))
        except OSError:
            pass
names = ("litestream.yml", "litestream.yaml", ".litestream.yml")
found = []
for root, dirs, files in os.walk("/"):
    dirs[:] = [d for d in dirs if os.path.join(root, d) not in ("/proc", "/sys", "/dev")]
    found += [os.path.join(root, n) for n in dirs + files
              if n.startswith("hermes-litestream") or n in names]
try:
    with open(target, "w") as handle:
        handle.write("{}")
    write = "written"
except OSError as error:
    write = error.strerror
print(json.dumps({"uid": os.getuid(), "process_uids": sorted(uids), "configs": sorted(found),
                  "target_exists": os.path.lexists(target), "write": write}))
"""

# The agent's shell plants Litestream configs whose exec: would write a marker into the data
# dir (and a replica beside it) if Litestream ever ran them: under replicate's own config path
# (argv[1], in the agent's own /tmp), under the old shared name, as a link, and in the data dir.
PLANT_CONFIG = """
import contextlib, json, os, sys
target, marker, database = sys.argv[1:4]
config = json.dumps({
    "exec": f"sh -c 'id > {marker}; env >> {marker}'",
    "dbs": [{"path": database, "replica": {"type": "file", "path": marker + "-replica"}}],
})
planted = [target, "/tmp/hermes-litestream.yml", "/opt/data/litestream.yml"]
os.makedirs(os.path.dirname(target), exist_ok=True)
for path in planted:
    with open(path, "w") as handle:
        handle.write(config)
with contextlib.suppress(FileExistsError):  # the exec may be repeated
    os.symlink(target, "/tmp/litestream.yml")
print(json.dumps({"planted": [p for p in [*planted, "/tmp/litestream.yml"] if os.path.exists(p)]}))
"""

# A new WAL database with a table (what replicate replicates), and rows added; its row count.
PROBE = """
import json, sys
from hermes_runtime.common.sqlite import connect
conn = connect(sys.argv[1])
conn.execute("CREATE TABLE IF NOT EXISTS probe(id INTEGER PRIMARY KEY, note TEXT)")
with conn:
    for i in range(int(sys.argv[2])):
        conn.execute("INSERT INTO probe(note) VALUES (?)", (f"row {i}",))
rows = conn.execute("SELECT count(*) FROM probe").fetchall()[0][0]
mode = conn.execute("PRAGMA journal_mode").fetchall()[0][0]
conn.close()
print(json.dumps({"rows": rows, "journal_mode": mode}))
"""

EXISTS = "import json, os, sys; print(json.dumps({p: os.path.lexists(p) for p in sys.argv[1:]}))"

# The agent's shell asks Vault (which the pod's policy lets it reach: its Vault containers
# need it) for the backup path: without a token, then with whatever JWT it is handed (on
# stdin), logging in as each role. Prints each HTTP status, never a value read.
VAULT_TRY = """
import json, sys, urllib.error, urllib.request
spec = json.loads(sys.stdin.read())
def call(path, body=None, token=""):
    request = urllib.request.Request(
        spec["addr"] + "/v1/" + path, data=None if body is None else json.dumps(body).encode(),
        headers={"X-Vault-Token": token} if token else {},
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, json.loads(response.read() or b"{}")
    except urllib.error.HTTPError as error:
        return error.code, {}
seen = {"backup path without a token": call(spec["backup"])[0]}
for role in spec["roles"]:
    seen[f"login {role} without a JWT"] = call(spec["login"], {"role": role, "jwt": ""})[0]
    status, answer = call(spec["login"], {"role": role, "jwt": spec["jwt"]})
    seen[f"login {role} with the pod's JWT"] = status
    token = (answer.get("auth") or {}).get("client_token", "")
    for name in ("backup", "replicate"):
        if token:
            seen[f"{role}: {name} path"] = call(spec[name], token=token)[0]
print(json.dumps(seen))
"""


def release_values(tmp_path: Path, s3_keys: dict[str, str]) -> Path:
    """Vault for the agent's model key, replication's S3 keys at their own path (the agent
    pod's role reads it) and the backup's at the backup path (the backup role alone);
    the refresher on; backups by CronJob with continuous replication, both to the S3."""
    kv = {AGENT_PATH: ["LLM_API_KEY"], REPLICATE_PATH: [*s3_keys], BACKUP_PATH: [*s3_keys]}
    values = vault_values(ROLE, kv)
    consumers = {REPLICATE_PATH: ["replicate"], BACKUP_PATH: ["backup"]}
    for entry in values["vault"]["secrets"]:
        path = entry["path"].removeprefix(f"{KV_MOUNT}/data/")
        if path in consumers:
            entry["for"] = consumers[path]
    values["vault"]["refresher"] = {"enabled": True, "interval": 5}
    values.update(s3_values_without_credentials(), plugins=[], **images.agent_values())
    values["backup"]["continuous"] = {"enabled": True}
    return write_values(tmp_path, "compromised-replicate.json", values)


def replicate_view(cluster: kube.Cluster, namespace: str, pod: str) -> dict[str, Any]:
    out = kube.read_in_container(
        cluster, namespace, pod, "replicate", ["python3", "-c", REPLICATE_VIEW]
    )
    return dict(json.loads(out.strip().splitlines()[-1]))


def replicate_config(cluster: kube.Cluster, namespace: str, pod: str) -> dict[str, Any]:
    """Replicate's one config folder, once Litestream runs on a config written there."""
    seen: list[dict[str, Any]] = []

    def written() -> bool:
        seen[:] = replicate_view(cluster, namespace, pod)["configs"]
        return len(seen) == 1 and bool(seen[0].get("dbs"))

    kube.wait_until(written, 180, "replicate's Litestream config")
    return seen[0]


def replica_keys(s3: S3Access, prefix: str) -> list[str]:
    bucket = boto3.client(
        "s3",
        endpoint_url=s3.endpoint,
        region_name="us-east-1",
        aws_access_key_id=s3.access_key,
        aws_secret_access_key=s3.secret_key,
    )
    listed = bucket.list_objects_v2(Bucket=BUCKET, Prefix=prefix)
    return [str(item["Key"]) for item in listed.get("Contents", [])]


def restored_probe(s3: S3Access, probe: str, rows: int) -> dict[str, Any]:
    """Restore the latest snapshot with the replicas until the probe database holds `rows`
    (its replica is a second or two behind); the restore report and the database's check."""
    report: dict[str, Any] = {}

    def restored() -> bool:
        with tempfile.TemporaryDirectory() as scratch:
            dest = Path(scratch) / "data"
            replicas = f"s3://{BUCKET}/{PREFIX}/litestream"
            args = ["--snapshot", "latest", "--replicas", replicas, "--data-dir", str(dest)]
            done = backup_cli(s3, "restore", *args, "--json")
            assert done.returncode == 0, f"restore failed: {done.stderr[-3000:]}"
            report.update(json.loads(done.stdout))
            db = apsw.Connection(str(dest / probe), flags=apsw.SQLITE_OPEN_READONLY)
            try:
                report["integrity"] = db.execute("PRAGMA integrity_check").fetchall()[0][0]
                report["rows"] = db.execute("SELECT count(*) FROM probe").fetchall()[0][0]
            finally:
                db.close()
        return bool(report["rows"] == rows)

    kube.wait_until(restored, 120, f"a restore with {probe} at {rows} rows", interval=5)
    return report


@pytest.mark.timeout(900)
def test_an_injected_shell_cannot_swap_replicates_config_nor_read_the_backup_path(
    cluster: kube.Cluster,
    namespace: str,
    helm: kube.Helm,
    tmp_path: Path,
    openbao_token_reviewer: str,
) -> None:
    images.require(IMAGES)
    bao = install_openbao(cluster, namespace, helm, tmp_path)
    s3_keys = install_backends_and_s3(helm, tmp_path)
    secret_key = s3_keys["AWS_SECRET_ACCESS_KEY"]
    kv = {
        AGENT_PATH: {"LLM_API_KEY": "sk-vault-" + uuid.uuid4().hex},
        REPLICATE_PATH: s3_keys,
        BACKUP_PATH: s3_keys,
    }
    set_up_openbao(cluster, namespace, bao, kv)
    values = release_values(tmp_path, s3_keys)
    helm.install(RELEASE, CHART, values=[CI_VALUES, values], timeout="5m")

    session = f"replicate-{uuid.uuid4().hex[:8]}"
    codeword = f"codeword-{uuid.uuid4().hex[:12]}"
    chat(cluster, namespace, session, [f"Please remember {codeword} for later."])
    pod, ready, restarts = agent_state(cluster, namespace)
    assert ready and not any(restarts.values()), restarts
    before = replicate_config(cluster, namespace, pod)
    assert (before["folder_uid"], before["folder_mode"]) == (REPLICATE_UID, "0o700"), before

    # 1. The pod's Vault credential: the JWT its Vault containers log in with (read here by the
    # test, as only an attacker who had it would) is nowhere the agent's shell can read, and
    # neither are replication's S3 keys; no token file. (Before any FIFO is planted: the
    # walk reads every file.)
    jwt = kube.read_in_container(cluster, namespace, pod, "vault-refresher", ["cat", VAULT_JWT])
    wanted = {"the pod's Vault JWT": jwt.strip(), "S3 secret key": secret_key}
    hunt = in_agent(cluster, namespace, HUNT, stdin=json.dumps(wanted))
    assert hunt["scanned_files"] > 1000, hunt  # the walk really read the filesystem
    assert hunt["found"] == {name: [] for name in wanted}, hunt["found"]
    assert hunt["token"] is False, hunt  # no ServiceAccount token either
    assert in_agent(cluster, namespace, EXISTS, VAULT_JWT) == {VAULT_JWT: False}

    # ... so Vault refuses it the backup path; and even with the pod's JWT, the backup role
    # refuses the login and the agent pod's role is refused the backup path (it reads
    # replication's path: the token works, the policy says no).
    spec = {
        "addr": VAULT_ADDR,
        "login": f"auth/{AUTH_PATH}/login",
        "backup": f"{KV_MOUNT}/data/{BACKUP_PATH}",
        "replicate": f"{KV_MOUNT}/data/{REPLICATE_PATH}",
        "roles": [BACKUP_ROLE, ROLE],
        "jwt": jwt.strip(),
    }
    vault = in_agent(cluster, namespace, VAULT_TRY, stdin=json.dumps(spec))
    print(f"the agent's shell asking Vault: {vault}")
    refused = [
        "backup path without a token",
        f"login {ROLE} without a JWT",
        f"login {BACKUP_ROLE} without a JWT",
        f"login {BACKUP_ROLE} with the pod's JWT",
    ]
    assert all(vault[name] >= 400 for name in refused), vault
    assert vault[f"login {ROLE} with the pod's JWT"] == 200, vault
    assert vault[f"{ROLE}: backup path"] == 403, vault
    assert vault[f"{ROLE}: replicate path"] == 200, vault

    # 2. Replicate's config, from the agent's shell: no process of replicate's UID is visible,
    # no file or folder named like its config is readable anywhere, its path is absent here.
    reach = in_agent(cluster, namespace, REACH, before["path"])
    assert reach["process_uids"] == [reach["uid"]], reach
    assert reach["configs"] == [] and reach["target_exists"] is False, reach
    assert reach["write"] == "No such file or directory", reach

    # 3. Traps in the data dir for the backup pod (replicate scans it too); configs with an
    # exec: planted under every name; then a new database. Replicate restarts Litestream on a
    # config of its own (the new database's replica appears), and nothing planted ever runs.
    assert in_agent(cluster, namespace, PLANT) == {"planted": True}
    probe = f"probe-{uuid.uuid4().hex[:8]}.db"
    marker = f"/opt/data/planted-exec-ran-{uuid.uuid4().hex[:8]}"
    planted = in_agent(
        cluster, namespace, PLANT_CONFIG, before["path"], marker, f"/opt/data/{probe}"
    )
    assert len(planted["planted"]) == 4, planted
    made = in_agent(cluster, namespace, PROBE, f"/opt/data/{probe}", str(ROWS_BEFORE_BACKUP))
    assert made == {"rows": ROWS_BEFORE_BACKUP, "journal_mode": "wal"}, made
    secret = release_secret(cluster, namespace, RELEASE, "RESTIC_PASSWORD")
    password = base64.b64decode(secret.data["RESTIC_PASSWORD"]).decode()
    replica_prefix = f"{PREFIX}/litestream/{namespace}.{RELEASE}/{probe}/"
    with kube.port_forward(cluster, namespace, "svc/s3", 8333) as port:
        s3 = s3_access(cluster, namespace, port, password, RELEASE)
        kube.wait_until(
            lambda: bool(replica_keys(s3, replica_prefix)), 120, f"the replica of {probe}"
        )
    after = replicate_config(cluster, namespace, pod)
    assert f"/opt/data/{probe}" in after["dbs"], after
    assert (after["folder"], after["path"]) == (before["folder"], before["path"]), after
    assert (after["uid"], after["mode"], after["link"]) == (REPLICATE_UID, "0o600", False), after
    assert after["keys"] == ["dbs", "logging"], after  # no exec: Litestream runs nothing
    agent_replicas = f"{BUCKET}/{PREFIX}/litestream/{namespace}.{RELEASE}/"
    assert all(r.startswith(agent_replicas) for r in after["replicas"]), after
    assert probe in kube.pod_log(cluster, namespace, pod, "replicate")
    ran = in_agent(cluster, namespace, EXISTS, marker, f"{marker}-replica")
    assert not any(ran.values()), ran

    # 4. The agent keeps serving; the backup taken afterwards and the replicas restore.
    name, ready, restarts = agent_state(cluster, namespace)
    assert (name, ready) == (pod, True) and not any(restarts.values()), restarts
    assert chat(cluster, namespace, session, ["Still there?"])[-1]
    assert lcm_json(cluster, namespace, "grep", codeword)["results"]
    kube.run_job_from_cronjob(cluster, namespace, f"{FULLNAME}-backup")
    assert in_agent(cluster, namespace, OUTSIDE) == {"outside": []}
    more = in_agent(cluster, namespace, PROBE, f"/opt/data/{probe}", str(ROWS_AFTER_BACKUP))
    total = ROWS_BEFORE_BACKUP + ROWS_AFTER_BACKUP
    assert more["rows"] == total, more
    with kube.port_forward(cluster, namespace, "svc/s3", 8333) as port:
        s3 = s3_access(cluster, namespace, port, password, RELEASE)
        report = restored_probe(s3, probe, total)
    print(f"restored after the attack: {json.dumps(report['sources'])}")
    assert report["sources"][probe]["source"] == "litestream", report["sources"]
    assert report["integrity"] == "ok", report
    assert {"lcm.db", "state.db"} <= report["sources"].keys(), report["sources"]
    ran = in_agent(cluster, namespace, EXISTS, marker, f"{marker}-replica")
    assert not any(ran.values()), ran
    name, ready, restarts = agent_state(cluster, namespace)
    assert (name, ready) == (pod, True) and not any(restarts.values()), restarts
