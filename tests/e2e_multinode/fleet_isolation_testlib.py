"""What one agent of a fleet can reach of another, probed from inside its agent container.

Why one script per agent, run by exec in its agent container: that container is where a
model's shell commands run, so what its processes can connect to, read and see in their
environment is the isolation a team gets. The script tries every target at once in threads
with short timeouts, so probing ten agents takes seconds, not minutes. Each probe also proves
it can see: its own API port and the LLM its policy allows must connect, and its own marker
file must be found, so a blind probe fails instead of passing.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from e2e import kube
from kubernetes import client

from .fleet_testlib import API_PORT, LLM_PORT, MARKER_PREFIX, METRICS_PORTS, Agent

# The backup keys the agent container must never hold (backups run in the CronJob's pods).
BACKUP_KEYS = ("RESTIC_PASSWORD", "AWS_SECRET_ACCESS_KEY", "AWS_ACCESS_KEY_ID")

# Runs in an agent container: every target tried at once (a TCP connect with a short timeout;
# names resolved first, an unresolved name reported as such), the API server asked for the
# namespace's Secrets when it can be reached at all, every file on the container's filesystem
# named like a fleet marker, and the backup keys looked for in the environment of every
# process the agent's user can read (by name, and the password by its SHA-256).
PROBE = """
import hashlib, json, os, socket, ssl, sys, threading, urllib.error, urllib.request
spec = json.load(sys.stdin)
out = {"connect": {}, "api": {}, "markers": [], "env_names": [], "env_secret": False}
def connect(target):
    name, host, port = target["name"], target["host"], target["port"]
    try:
        address = socket.getaddrinfo(host, port, socket.AF_INET, socket.SOCK_STREAM)[0][4]
    except OSError as error:
        out["connect"][name] = "unresolved: %s" % error
        return
    try:
        socket.create_connection(address, timeout=spec["timeout_s"]).close()
        out["connect"][name] = "open"
    except ConnectionRefusedError:
        out["connect"][name] = "refused"
    except socket.timeout:
        out["connect"][name] = "timeout"
    except OSError as error:
        out["connect"][name] = "error: %s" % error
threads = [threading.Thread(target=connect, args=(t,)) for t in spec["targets"]]
for t in threads:
    t.start()
for t in threads:
    t.join()
token_file = "/var/run/secrets/kubernetes.io/serviceaccount/token"
token = open(token_file).read().strip() if os.path.exists(token_file) else ""
for name, host, port in spec["apiservers"]:
    if out["connect"].get(name) != "open":
        out["api"][name] = out["connect"].get(name, "not tried")
        continue
    request = urllib.request.Request(
        "https://%s:%d/api/v1/namespaces/%s/secrets" % (host, port, spec["namespace"]),
        headers={"Authorization": "Bearer " + token} if token else {},
    )
    try:
        unverified = ssl._create_unverified_context()
        with urllib.request.urlopen(request, timeout=5, context=unverified) as response:
            out["api"][name] = "HTTP %d" % response.status
    except urllib.error.HTTPError as error:
        out["api"][name] = "HTTP %d" % error.code
    except OSError as error:
        out["api"][name] = "error: %s" % error
for root, dirs, files in os.walk("/", onerror=lambda error: None):
    if root == "/":
        dirs[:] = [d for d in dirs if d not in ("proc", "sys", "dev")]
    out["markers"] += [os.path.join(root, f) for f in files if f.startswith(spec["prefix"])]
hashes = set(spec["secret_sha256"])
environs = [dict(os.environ)]
for pid in filter(str.isdigit, os.listdir("/proc")):
    try:
        raw = open("/proc/%s/environ" % pid, "rb").read()
    except OSError:
        continue
    environs.append(dict(
        item.decode(errors="replace").partition("=")[::2] for item in raw.split(b"\\0") if item
    ))
for environ in environs:
    out["env_names"] += [k for k in spec["forbidden"] if k in environ]
    if any(hashlib.sha256(v.encode()).hexdigest() in hashes for v in environ.values()):
        out["env_secret"] = True
out["env_names"] = sorted(set(out["env_names"]))
out["processes_read"] = len(environs) - 1
print(json.dumps(out))
"""
PROBE_TIMEOUT_S = 3.0


@dataclass(frozen=True)
class Target:
    name: str
    host: str
    port: int
    reachable: bool  # what isolation requires: the agent's own API and the LLM, nothing else


def targets(
    agent: Agent, fleet: list[Agent], apiservers: list[tuple[str, str, int]]
) -> list[Target]:
    """What ``agent`` tries: every other agent's API and metrics ports by Service name (the
    short name in its own namespace, the cluster name in another) and by pod IP; the API
    server; and, as proof the probe can connect at all, its own API port by pod IP and the
    fake LLM its policy allows."""
    found = [
        Target("self api by pod IP", agent.pod_ip, API_PORT, True),
        Target("fake-llm (allowed)", "fake-llm", LLM_PORT, True),
    ]
    for other in fleet:
        if other.key == agent.key:
            continue
        where = "same namespace" if other.namespace == agent.namespace else "other namespace"
        suffix = (
            "" if other.namespace == agent.namespace else f".{other.namespace}.svc.cluster.local"
        )
        found.append(
            Target(f"{other.key} api svc ({where})", other.fullname + suffix, API_PORT, False)
        )
        for port in METRICS_PORTS:
            host = f"{other.fullname}-metrics{suffix}"
            found.append(Target(f"{other.key} metrics:{port} svc ({where})", host, port, False))
        for port in (API_PORT, *METRICS_PORTS):
            found.append(Target(f"{other.key} :{port} pod IP ({where})", other.pod_ip, port, False))
    found += [Target(name, host, port, False) for name, host, port in apiservers]
    return found


def apiserver_targets(cluster: kube.Cluster) -> list[tuple[str, str, int]]:
    """The API server by its Service name and by each of its own addresses."""
    found = [("apiserver kubernetes.default.svc:443", "kubernetes.default.svc.cluster.local", 443)]
    slices = (
        client.DiscoveryV1Api(cluster.api)
        .list_namespaced_endpoint_slice(
            "default", label_selector="kubernetes.io/service-name=kubernetes"
        )
        .items
    )
    for item in slices:
        for port in item.ports or []:
            for endpoint in item.endpoints or []:
                for address in endpoint.addresses:
                    found.append((f"apiserver {address}:{port.port}", address, int(port.port)))
    return found


@dataclass(frozen=True)
class Probe:
    agent: Agent
    result: dict[str, Any]


def probe(
    cluster: kube.Cluster,
    agent: Agent,
    fleet: list[Agent],
    apiservers: list[tuple[str, str, int]],
    secret_sha256: list[str],
) -> Probe:
    """The probe script's findings from ``agent``'s container."""
    spec = {
        "targets": [t.__dict__ for t in targets(agent, fleet, apiservers)],
        "apiservers": apiservers,
        "namespace": agent.namespace,
        "timeout_s": PROBE_TIMEOUT_S,
        "prefix": MARKER_PREFIX,
        "forbidden": list(BACKUP_KEYS),
        "secret_sha256": secret_sha256,
    }
    done = kube.exec_in_container(
        cluster,
        agent.namespace,
        agent.pod,
        "agent",
        ["python3", "-c", PROBE],
        json.dumps(spec),
        timeout=180,
        repeatable=True,
    )
    assert done.returncode == 0, (
        f"probe in {agent.key} failed: {done.stdout[-2000:]} {done.stderr[-2000:]}"
    )
    return Probe(agent, json.loads(done.stdout.strip().splitlines()[-1]))


def breaches(found: Probe, fleet: list[Agent], apiservers: list[tuple[str, str, int]]) -> list[str]:
    """Everything in one agent's findings that isolation forbids, one line each."""
    agent, result = found.agent, found.result
    lines = []
    api_names = {name for name, _, _ in apiservers}
    for target in targets(agent, fleet, apiservers):
        state = result["connect"].get(target.name, "missing")
        if target.name in api_names:
            continue  # judged by its answer below: a connection refused a listing is fine
        if target.reachable and state != "open":
            lines.append(
                f"{agent.key}: {target.name} {target.host}:{target.port} should connect: {state}"
            )
        elif not target.reachable and state == "open":
            lines.append(f"{agent.key}: reached {target.name} {target.host}:{target.port}")
        elif not target.reachable and state.startswith(("unresolved", "missing")):
            lines.append(f"{agent.key}: {target.name} not tried, so not shown closed: {state}")
    for name in sorted(api_names):
        answer = result["api"].get(name, "missing")
        if answer.startswith(("unresolved", "missing", "not tried")):
            lines.append(f"{agent.key}: {name} not tried, so not shown closed: {answer}")
        elif answer.startswith("HTTP") and answer not in ("HTTP 401", "HTTP 403"):
            lines.append(f"{agent.key}: {name} answered a listing of Secrets with {answer}")
        elif answer.startswith("error"):
            lines.append(f"{agent.key}: {name} connected, then the listing failed: {answer}")
    mine = [m for m in result["markers"] if m.endswith(agent.marker)]
    others = [m for m in result["markers"] if not m.endswith(agent.marker)]
    if others:
        lines.append(f"{agent.key}: sees other agents' markers {others}")
    if not mine:
        lines.append(f"{agent.key}: its own marker {agent.marker} not found (the search is blind)")
    if result["env_names"] or result["env_secret"]:
        lines.append(
            f"{agent.key}: backup keys in the environment: {result['env_names']}, "
            f"the restic password among the values: {result['env_secret']}"
        )
    return lines


def write_marker(cluster: kube.Cluster, agent: Agent) -> None:
    """A file only this agent wrote, on its data volume."""
    command = ["sh", "-c", f"echo {agent.key} > /opt/data/{agent.marker}"]
    done = kube.exec_in_container(cluster, agent.namespace, agent.pod, "agent", command, timeout=60)
    assert done.returncode == 0, f"marker in {agent.key}: {done.stderr}"


def may_list_secrets(cluster: kube.Cluster, agent: Agent, namespace: str) -> bool:
    """The API server's own verdict (a SubjectAccessReview): may the agent's ServiceAccount
    list the Secrets of ``namespace``."""
    user = f"system:serviceaccount:{agent.namespace}:{agent.service_account}"
    review = client.V1SubjectAccessReview(
        spec=client.V1SubjectAccessReviewSpec(
            user=user,
            groups=[
                "system:serviceaccounts",
                f"system:serviceaccounts:{agent.namespace}",
                "system:authenticated",
            ],
            resource_attributes=client.V1ResourceAttributes(
                namespace=namespace, verb="list", resource="secrets"
            ),
        )
    )
    answer = client.AuthorizationV1Api(cluster.api).create_subject_access_review(review)
    return bool(answer.status.allowed)
