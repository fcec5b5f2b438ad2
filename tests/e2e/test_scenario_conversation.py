"""Scenario 3: a conversation through the agent's API server lands in the LCM database.

The chart is installed with values-examples/ci.yaml plus small LCM thresholds, so a
handful of turns against the in-cluster fake LLM (tests/fakes/openai_server.py) is
enough to make Lossless Context Management compact. One turn asks the fake LLM for a
`terminal` tool call whose output (about 24 kB) is far above `externalize_chars`, so
LCM must move it to /opt/data/outputs. Everything is checked from inside the agent
container with the same `hermes-runtime lcm` commands an operator would use.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import pytest

from . import images, kube

CHART = kube.REPO_ROOT / "charts" / "hermes-agent"
CI_VALUES = images.ci_values()  # values-examples/ci.yaml, pulling from the registry
BACKENDS_CHART = Path(__file__).parent / "charts" / "ci-backends"
RELEASE = "hermes"
AGENT_SELECTOR = f"app.kubernetes.io/instance={RELEASE},app.kubernetes.io/component=agent"
IMAGES = ["agent", "fake-llm"]
SESSION = "e2e-conversation"
LAST_NUMBER = 103000  # the tool turn runs `seq 100000 LAST_NUMBER`: ~24 kB of output
MIDDLE_NUMBER = 101500  # only the tool output holds it, not the turn that asked for it

# Hermes refuses models below 64K context; 30% of it is reached after ~3 big turns.
CONVERSATION_VALUES: dict[str, Any] = {
    "hermes": {"config": {"model": {"context_length": 65536}}},
    "lcm": {
        "thresholdPercent": 0.3,
        "targetPercent": 0.2,
        "freshTailMessages": 2,
        "embeddings": {"mode": "off"},
        "extraConfig": {"externalize_chars": 4000},
    },
    # A crash of the gateway (signal) then prints a Python traceback in the pod log.
    "agent": {"env": [{"name": "PYTHONFAULTHANDLER", "value": "1"}]},
}

# Runs inside the agent container (python3 is there): POST each turn, print the replies.
# The API key and the turns arrive on stdin, never as process arguments.
CHAT_CLIENT = """
import json, sys, time, urllib.error, urllib.request
spec = json.load(sys.stdin)
# A new Service reaches kube-proxy and DNS a moment after its pod turns Ready (and a
# reinstalled one gets a new ClusterIP): wait until /health answers through it.
health = spec["url"].rsplit("/v1/", 1)[0] + "/health"
for attempt in range(60):
    try:
        with urllib.request.urlopen(health, timeout=5) as response:
            if response.status == 200 and b"status" in response.read():
                break
    except OSError:
        pass
    time.sleep(1)
else:
    sys.exit(f"{health} never answered through the Service")
replies = []
for text in spec["turns"]:
    body = {"model": "hermes-agent", "messages": [{"role": "user", "content": text}]}
    request = urllib.request.Request(
        spec["url"],
        data=json.dumps(body).encode(),
        headers={
            "Authorization": "Bearer " + spec["key"],
            "Content-Type": "application/json",
            "X-Hermes-Session-Id": spec["session"],
        },
    )
    try:
        with urllib.request.urlopen(request, timeout=240) as response:
            replies.append(json.loads(response.read())["choices"][0]["message"]["content"])
    except urllib.error.HTTPError as error:
        sys.exit(f"HTTP {error.code} from {spec['url']}: {error.read()[:2000]!r}")
print(json.dumps(replies))
"""


def agent_pod(cluster: kube.Cluster, namespace: str) -> str:
    pods = cluster.core.list_namespaced_pod(namespace, label_selector=AGENT_SELECTOR).items
    running = [
        p.metadata.name
        for p in pods
        if p.status.phase == "Running" and p.metadata.deletion_timestamp is None
    ]
    assert len(running) == 1, (
        f"expected one running agent pod, got {[p.metadata.name for p in pods]}"
    )
    return str(running[0])


def agent_exec(
    cluster: kube.Cluster,
    namespace: str,
    command: list[str],
    stdin: str = "",
    *,
    repeatable: bool = False,
) -> str:
    """Run a command in the agent container (kubectl exec); fail with its stderr.

    `repeatable`: the command only reads, so an exec whose stream was cut runs it again.
    """
    pod = agent_pod(cluster, namespace)
    result = kube.exec_in_container(
        cluster, namespace, pod, "agent", command, stdin, repeatable=repeatable
    )
    assert result.returncode == 0, (
        f"`{' '.join(command)}` in {namespace}/{pod} exited {result.returncode}\n"
        f"stdout:\n{result.stdout[-3000:]}\nstderr:\n{result.stderr[-3000:]}"
    )
    return result.stdout


def api_key(cluster: kube.Cluster, namespace: str) -> str:
    """The API server key from the chart's Secret (what a client of the release uses)."""
    selector = f"app.kubernetes.io/instance={RELEASE}"
    secrets = cluster.core.list_namespaced_secret(namespace, label_selector=selector).items
    keys = [s.data["api-key"] for s in secrets if s.data and "api-key" in s.data]
    assert len(keys) == 1, f"expected one Secret with api-key for {selector}"
    return base64.b64decode(keys[0]).decode()


def service_url(cluster: kube.Cluster, namespace: str) -> str:
    (service,) = cluster.core.list_namespaced_service(
        namespace, label_selector=AGENT_SELECTOR
    ).items
    (port,) = [p.port for p in service.spec.ports if p.name == "http"]
    return f"http://{service.metadata.name}:{port}/v1/chat/completions"


FETCH_URL = (
    "import sys, urllib.request; "
    "print(urllib.request.urlopen(sys.argv[1], timeout=10).read().decode())"
)


def service_port_url(cluster: kube.Cluster, namespace: str, port_name: str, path: str) -> str:
    """URL of a named port on the release's Services (metrics have a ClusterIP Service)."""
    services = cluster.core.list_namespaced_service(
        namespace, label_selector=f"app.kubernetes.io/instance={RELEASE}"
    ).items
    ((name, port),) = [
        (s.metadata.name, p.port) for s in services for p in s.spec.ports if p.name == port_name
    ]
    return f"http://{name}:{port}{path}"


def metric_total(exposition: str, name: str) -> float:
    """Sum of every sample of `name` (all label sets) in Prometheus text format."""
    values = [
        float(line.rsplit(" ", 1)[1])
        for line in exposition.splitlines()
        if line.startswith((name + " ", name + "{"))
    ]
    assert values, f"metric {name} not exposed:\n{exposition[:2000]}"
    return sum(values)


def chat(cluster: kube.Cluster, namespace: str, session: str, turns: list[str]) -> list[str]:
    """Send the turns, one request each, through the agent's Service (cluster DNS)."""
    spec = {
        "url": service_url(cluster, namespace),
        "key": api_key(cluster, namespace),
        "session": session,
        "turns": turns,
    }
    out = agent_exec(cluster, namespace, ["python3", "-c", CHAT_CLIENT], stdin=json.dumps(spec))
    return list(json.loads(out.strip().splitlines()[-1]))


def lcm_json(cluster: kube.Cluster, namespace: str, *args: str) -> dict[str, Any]:
    out = agent_exec(
        cluster, namespace, ["hermes-runtime", "lcm", *args, "--db", "/opt/data/lcm.db", "--json"]
    )
    return dict(json.loads(out))


def install_agent(
    helm: kube.Helm, tmp_path: Path, values: dict[str, Any], name: str = "values.yaml"
) -> None:
    """The backends then the agent with ci.yaml + `values` (JSON is valid YAML)."""
    extra = tmp_path / name
    extra.write_text(json.dumps(values))
    helm.install(RELEASE, CHART, values=[CI_VALUES, extra], timeout="5m")


def big_turn(index: int) -> str:
    return f"Turn {index}. marker-word-{index} " + "Notes about the harbour and the weather. " * 600


@pytest.mark.timeout(900)
def test_conversation_is_stored_externalized_and_compacted_by_lcm(
    cluster: kube.Cluster, namespace: str, helm: kube.Helm, tmp_path: Path
) -> None:
    images.require(IMAGES)
    helm.install("backends", BACKENDS_CHART, timeout="3m")
    install_agent(helm, tmp_path, CONVERSATION_VALUES)

    tool_turn = f'Count for me. [[tool:terminal {{"command": "seq 100000 {LAST_NUMBER}"}}]]'
    turns = [tool_turn] + [big_turn(i) for i in range(1, 6)]
    replies = chat(cluster, namespace, SESSION, turns)

    assert len(replies) == len(turns)
    # The fake LLM answers a tool result with "Tool results: NAME -> <output head>".
    assert replies[0].startswith("Tool results: terminal"), replies[0][:300]
    assert "100000" in replies[0], replies[0][:300]

    stats = lcm_json(cluster, namespace, "stats")
    assert stats["sessions"] >= 1, stats
    assert stats["messages"] >= len(turns) * 2, stats
    assert stats["summaries"] >= 1, f"no compaction happened: {stats}"
    assert stats["outputs"] >= 1, stats

    for index in range(1, 6):
        hits = lcm_json(cluster, namespace, "grep", f"marker-word-{index}", "--session", SESSION)
        users = [h for h in hits["results"] if h["kind"] == "message" and h["role"] == "user"]
        assert len(users) == 1, f"turn {index} must be stored exactly once: {hits}"

    # The big tool output lives as a file under /opt/data/outputs, not inside lcm.db.
    holders = agent_exec(
        cluster, namespace, ["grep", "-rlF", str(MIDDLE_NUMBER), "/opt/data/outputs"]
    ).split()
    assert holders, "the terminal output was not externalized under /opt/data/outputs"
    tool_hits = lcm_json(
        cluster, namespace, "grep", "externalized tool output", "--session", SESSION
    )
    tool_messages = [h for h in tool_hits["results"] if h["role"] == "tool"]
    assert tool_messages, f"no tool message points at an externalized output: {tool_hits}"

    # LCM's own figures come from the gateway process, through the Service's lcm-metrics port.
    url = service_port_url(cluster, namespace, "lcm-metrics", "/metrics")
    exposition = agent_exec(cluster, namespace, ["python3", "-c", FETCH_URL, url])
    assert metric_total(exposition, "lcm_messages_ingested_total") >= len(turns) * 2, url
    assert metric_total(exposition, "lcm_summaries_total") >= 1, url
