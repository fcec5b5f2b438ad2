"""Vault (OpenBao) down: during a rotation and when a pod starts (issue 30).

Setup as tests/e2e/test_scenario_vault.py: OpenBao in the namespace, Kubernetes auth, the
model key and the API key at a KV v2 path, the agent's secrets rendered by the chart's
`vault-render` init container (and, in the first test, kept fresh by the refresher sidecar).
"Vault down" is OpenBao scaled to 0. Its dev server keeps everything in memory, so when it is
scaled back the test configures it again, as restoring Vault's storage would: auth method,
policy, role and secrets; tokens issued before are unknown to it.

- During a rotation: Vault goes down; the refresher logs `vault.refresh.failed` naming the
  address and keeps the files it had; the agent keeps answering with the last key, also
  after its container is restarted (the in-memory secrets volume outlives the container);
  Vault comes back holding a rotated key: the refresher logs in again and the new key
  reaches the LLM, in the same pod.
- At pod start: with Vault down a new pod's `vault-render` fails with a log naming the
  address and the cause, and the agent container never starts without its secrets; once
  Vault is back the kubelet's retry of the init container starts the pod.

The agent's /metrics says it too: the refresher (another container) notes each outcome beside
the agent's env file, and the agent exports it (hermes_runtime_secrets_refresh_ok 0 and the
failures counted while Vault is down, 1 once back). Printed: fault -> detected (the log
line), Vault back -> key in use or pod Ready.
"""

from __future__ import annotations

import json
import secrets
import time
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from . import images, kube
from . import storage_testlib as storage
from .test_scenario_vault import (  # noqa: F401 (openbao_token_reviewer: a fixture)
    AGENT_PATH,
    BACKENDS_CHART,
    CHART,
    CI_VALUES,
    RELEASE,
    ROLE,
    VAULT_ADDR,
    OpenBao,
    agent_metric,
    chat_until_the_llm_sees,
    install_openbao,
    only_pod,
    openbao_token_reviewer,
    set_up_openbao,
    vault_values,
    write_values,
)

IMAGES = ["agent", "fake-llm", "git-server", "openbao"]
REFRESH_SECONDS = 5
OUTAGE_SECONDS = 30
STANDIN = "openbao-refuses"


def openbao_pods(cluster: kube.Cluster, namespace: str) -> list[client.V1Pod]:
    pods = cluster.core.list_namespaced_pod(namespace, label_selector="app=openbao").items
    return [p for p in pods if p.metadata.name != STANDIN]


def vault_down(cluster: kube.Cluster, namespace: str) -> float:
    """OpenBao scaled to 0, a pod refusing its port in its place (storage_testlib says
    why); the moment its pod is gone."""
    kube.kubectl(cluster, namespace, "scale", "deployment/openbao", "--replicas=0")
    kube.wait_until(lambda: not openbao_pods(cluster, namespace), 120, "the openbao pod gone")
    down = time.time()
    storage.refusing_standin(cluster, namespace, STANDIN, {"app": "openbao"}, "http", 8200)
    return down


def vault_up(cluster: kube.Cluster, namespace: str, bao: OpenBao, fields: dict[str, str]) -> float:
    """OpenBao back and configured again (its dev storage is memory); the moment it is."""
    storage.remove_standin(cluster, namespace, STANDIN)
    kube.kubectl(cluster, namespace, "scale", "deployment/openbao", "--replicas=1")
    kube.kubectl(cluster, namespace, "rollout", "status", "deployment/openbao", "--timeout=180s")
    set_up_openbao(cluster, namespace, bao, {AGENT_PATH: fields})
    return time.time()


def container_log(cluster: kube.Cluster, namespace: str, pod: str, container: str) -> str:
    return kube.pod_log(cluster, namespace, pod, container)


def log_events(text: str, event: str) -> list[dict[str, Any]]:
    found = []
    for line in text.splitlines():
        if line.startswith("{"):
            try:
                record = json.loads(line)
            except ValueError:
                continue
            if record.get("event") == event:
                found.append(record)
    return found


def wait_log_event(
    cluster: kube.Cluster, namespace: str, pod: str, container: str, event: str, after: int
) -> dict[str, Any]:
    """The first ``event`` line of the container's log past the ``after`` first ones."""
    found: list[dict[str, Any]] = []

    def logged() -> bool:
        found[:] = log_events(container_log(cluster, namespace, pod, container), event)[after:]
        return bool(found)

    kube.wait_until(logged, 120, f"{event} in the log of {pod}/{container}", interval=1)
    return found[0]


def refresh_metrics(cluster: kube.Cluster, namespace: str, pod: str) -> dict[str, float]:
    """The agent's hermes_runtime_secrets_refresh_* series (the refresher's status record)."""
    lines = agent_metric(cluster, namespace, pod, "hermes_runtime_secrets_refresh").splitlines()
    return {line.split()[0]: float(line.split()[1]) for line in lines if line.strip()}


def agent_restarts(pod: client.V1Pod) -> int:
    (agent,) = [s for s in pod.status.container_statuses if s.name == "agent"]
    return int(agent.restart_count)


@pytest.mark.usefixtures("openbao_token_reviewer")
@pytest.mark.timeout(900)
def test_vault_down_during_a_rotation_the_agent_keeps_its_last_secrets(
    cluster: kube.Cluster,
    namespace: str,
    helm: kube.Helm,
    tmp_path: Path,
) -> None:
    images.require(IMAGES)
    began = time.monotonic()
    bao = install_openbao(cluster, namespace, helm, tmp_path)
    helm.install("backends", BACKENDS_CHART, timeout="3m")
    old_key = "sk-old-" + secrets.token_hex(16)
    new_key = "sk-new-" + secrets.token_hex(16)
    api_key = "api-vault-" + secrets.token_hex(16)
    set_up_openbao(
        cluster, namespace, bao, {AGENT_PATH: {"LLM_API_KEY": old_key, "API_SERVER_KEY": api_key}}
    )
    values = vault_values(ROLE, {AGENT_PATH: ["LLM_API_KEY", "API_SERVER_KEY"]})
    values["vault"]["refresher"] = {"enabled": True, "interval": REFRESH_SECONDS}
    helm.install(RELEASE, CHART, values=[CI_VALUES, write_values(tmp_path, "r.yaml", values)])
    pod = only_pod(cluster, namespace, RELEASE).metadata.name
    chat_until_the_llm_sees(cluster, namespace, pod, api_key, f"Bearer {old_key}")
    failures_before = len(
        log_events(
            container_log(cluster, namespace, pod, "vault-refresher"), "vault.refresh.failed"
        )
    )
    print(f"\ninstalled in {time.monotonic() - began:.0f} s")

    down = vault_down(cluster, namespace)
    failed = wait_log_event(
        cluster, namespace, pod, "vault-refresher", "vault.refresh.failed", failures_before
    )
    detected = time.time()
    assert VAULT_ADDR.removeprefix("http://") in failed["error"], failed
    print(f"refresher while Vault is down: {json.dumps(failed)}")
    # The last key keeps working, also through a restart of the agent container.
    tries = chat_until_the_llm_sees(cluster, namespace, pod, api_key, f"Bearer {old_key}")
    kube.exec_in_container(cluster, namespace, pod, "agent", ["kill", "1"])
    kube.wait_until(
        lambda: (
            agent_restarts(only_pod(cluster, namespace, RELEASE)) == 1
            and all(
                s.ready for s in only_pod(cluster, namespace, RELEASE).status.container_statuses
            )
        ),
        240,
        "the agent container restarted and ready",
    )
    after = chat_until_the_llm_sees(cluster, namespace, pod, api_key, f"Bearer {old_key}")
    print(f"chats during the outage: {tries} then {after} after the container restart")
    kube.wait_until(
        lambda: (
            refresh_metrics(cluster, namespace, pod).get("hermes_runtime_secrets_refresh_ok") == 0
        ),
        60,
        "/metrics to say the refresh failed",
    )
    during = refresh_metrics(cluster, namespace, pod)
    print(f"/metrics during the outage: {during}")
    assert during["hermes_runtime_secrets_refresh_failures_total"] >= 1, during
    assert during["hermes_runtime_secrets_refresh_last_success_timestamp_seconds"] < down
    time.sleep(max(0.0, OUTAGE_SECONDS - (time.time() - down)))  # the outage's length

    up = vault_up(cluster, namespace, bao, {"LLM_API_KEY": new_key, "API_SERVER_KEY": api_key})
    chat_until_the_llm_sees(cluster, namespace, pod, api_key, f"Bearer {new_key}")
    recovered = time.time()
    back = refresh_metrics(cluster, namespace, pod)
    assert back["hermes_runtime_secrets_refresh_ok"] == 1, back
    assert back["hermes_runtime_secrets_refresh_last_success_timestamp_seconds"] >= up - 1
    log = container_log(cluster, namespace, pod, "vault-refresher")
    assert only_pod(cluster, namespace, RELEASE).metadata.name == pod, "the pod was replaced"
    for value in (old_key, new_key, api_key):
        assert value not in log, "a Vault value is in the refresher's log"
    print(
        "figures: "
        + json.dumps(
            {
                "fault": f"Vault down {OUTAGE_SECONDS} s during a rotation (refresher)",
                "detect_s": round(detected - down, 1),  # vault.refresh.failed logged
                "recover_s": round(recovered - up, 1),  # Vault back -> rotated key in use
                "failed_requests": 0 if tries == 1 and after == 1 else tries + after - 2,
                "relogin": bool(log_events(log, "vault.token.relogin")),
            }
        )
    )
    print(f"total {time.monotonic() - began:.0f} s")


@pytest.mark.usefixtures("openbao_token_reviewer")
@pytest.mark.timeout(900)
def test_vault_down_when_a_pod_starts_it_waits_and_starts_once_vault_is_back(
    cluster: kube.Cluster,
    namespace: str,
    helm: kube.Helm,
    tmp_path: Path,
) -> None:
    images.require(IMAGES)
    began = time.monotonic()
    bao = install_openbao(cluster, namespace, helm, tmp_path)
    helm.install("backends", BACKENDS_CHART, timeout="3m")
    model_key = "sk-vault-" + secrets.token_hex(16)
    api_key = "api-vault-" + secrets.token_hex(16)
    fields = {"LLM_API_KEY": model_key, "API_SERVER_KEY": api_key}
    set_up_openbao(cluster, namespace, bao, {AGENT_PATH: fields})
    values = vault_values(ROLE, {AGENT_PATH: [*fields]})
    helm.install(RELEASE, CHART, values=[CI_VALUES, write_values(tmp_path, "v.yaml", values)])
    old = only_pod(cluster, namespace, RELEASE).metadata.name
    chat_until_the_llm_sees(cluster, namespace, old, api_key, f"Bearer {model_key}")
    print(f"\ninstalled in {time.monotonic() - began:.0f} s")

    down = vault_down(cluster, namespace)
    kube.kubectl(cluster, namespace, "delete", "pod", old, "--wait=false")
    failure = render_failed(cluster, namespace, old)
    detected = time.time()
    print(f"new pod's vault-render with Vault down: {failure['log'].strip().splitlines()[-3:]}")
    assert failure["code"] != 0
    assert VAULT_ADDR in failure["log"], failure["log"]
    new = failure["pod"]
    time.sleep(max(0.0, OUTAGE_SECONDS - (time.time() - down)))

    up = vault_up(cluster, namespace, bao, fields)
    kube.wait_until(
        lambda: pod_ready(cluster, namespace, new), 600, f"pod {new} Ready after Vault came back"
    )
    ready = time.time()
    chat_until_the_llm_sees(cluster, namespace, new, api_key, f"Bearer {model_key}")
    print(
        "figures: "
        + json.dumps(
            {
                "fault": f"Vault down {OUTAGE_SECONDS} s when a pod starts",
                "detect_s": round(detected - down, 1),  # vault-render failed, logged
                "recover_s": round(ready - up, 1),  # Vault back -> new pod Ready
                "init_restarts": failure_restarts(cluster, namespace, new),
            }
        )
    )
    print(f"total {time.monotonic() - began:.0f} s")


def render_failed(cluster: kube.Cluster, namespace: str, old: str) -> dict[str, Any]:
    """The replacement pod's first failed vault-render: its name, exit code and log; the
    agent container has not started."""
    seen: dict[str, Any] = {}

    def failed() -> bool:
        for pod in cluster.core.list_namespaced_pod(
            namespace,
            label_selector=f"app.kubernetes.io/instance={RELEASE},"
            "app.kubernetes.io/component=agent",
        ).items:
            if pod.metadata.name == old:
                continue
            for status in pod.status.init_container_statuses or []:
                for previous, state in ((False, status.state), (True, status.last_state)):
                    if status.name == "vault-render" and state and state.terminated:
                        seen.update(pod=pod, previous=previous, code=state.terminated.exit_code)
                        return True
        return False

    kube.wait_until(failed, 240, "the new pod's vault-render to fail")
    pod: client.V1Pod = seen["pod"]
    log = kube.pod_log(
        cluster, namespace, pod.metadata.name, "vault-render", previous=seen["previous"]
    )
    agent = [s for s in pod.status.container_statuses or [] if s.name == "agent"]
    assert not any(s.state.running for s in agent), "the agent started without its secrets"
    return {"pod": pod.metadata.name, "code": seen["code"], "log": log}


def pod_ready(cluster: kube.Cluster, namespace: str, name: str) -> bool:
    conditions = cluster.core.read_namespaced_pod(name, namespace).status.conditions or []
    return any(c.type == "Ready" and c.status == "True" for c in conditions)


def failure_restarts(cluster: kube.Cluster, namespace: str, name: str) -> int:
    pod = cluster.core.read_namespaced_pod(name, namespace)
    (render,) = [s for s in pod.status.init_container_statuses if s.name == "vault-render"]
    return int(render.restart_count)
