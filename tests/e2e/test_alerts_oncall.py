"""The on-call alerts a kind cluster can cause beyond tests/e2e/test_alerts.py, and the
chart's dashboard, against a real Prometheus (tests/e2e/prometheus_testlib.py) evaluating
the chart's own PrometheusRules.

- The dashboard, a stale plugin and a down agent, on one release: backups every 60 s from
  the sidecar to SeaweedFS, one git-synced plugin, the static embedder, the fault suite's
  two chat clients. Every query of every panel of charts/hermes-agent/files/dashboard.json,
  its template variables set to this release and namespace, answers without error and with
  data, and each variable's label_values() finds this release; HermesEmbeddingBacklogGrowing
  stays quiet while the embedder keeps up. A plugin commit that fails its link (an absolute
  symlink) fires HermesPluginSyncStale. Then the agent is scaled to 0: HermesAgentDown
  fires, and HermesBackupMissing fires while no series of the agent is scraped any more (its
  backup figures outlive the pod in Prometheus, where the old rule went quiet).
- Embeddings that fail (`openai` mode against a port nobody serves): turns are stored and
  none is embedded, and HermesEmbeddingBacklogGrowing fires (its quiet counterpart is the
  first test's, with an embedder that works).
- Vault down (OpenBao scaled to 0, as in tests/e2e/test_faults_vault.py): the refresher's
  failures fire HermesVaultRefreshFailing; Vault back and configured again, it clears.

HermesVerifyFailed and the kube-state-metrics parts of HermesBackupMissing,
HermesBackupFailed (the backup CronJob's series) and HermesPluginSyncStale (git-sync's
restarts) fire live in tests/e2e/test_alerts_ksm.py, against upstream's kube-state-metrics
built from the Go module proxy.

Tested with promtool only (tests/chart/test_chart_alerts_*.py), and why:

- The held-connections part of HermesFrontDoorSaturated (held over 80% of the maximum for
  a scrape): the refusals part fires live in test_alerts.py; holding most of a maximum of
  connections for seconds needs a gateway that stays away that long.
"""

from __future__ import annotations

import json
import secrets
import time
from pathlib import Path
from typing import Any

import pytest

from . import faults_testlib as lib
from . import images, kube
from . import prometheus_testlib as prom
from . import storage_testlib as storage
from .gitremote_testlib import git_remote
from .test_alerts import BACKUP_VALUES, FULLNAME, JOB, values_files
from .test_faults_vault import vault_down, vault_up
from .test_scenario_conversation import AGENT_SELECTOR, BACKENDS_CHART, CHART, RELEASE
from .test_scenario_plugins import (  # noqa: F401 (git_sync_choice, git_sync_image: fixtures)
    REPOS,
    agent_values,
    backends_values,
    git_sync_choice,
    git_sync_image,
    plugin_files,
)
from .test_scenario_vault import (  # noqa: F401 (openbao_token_reviewer: a fixture)
    AGENT_PATH,
    ROLE,
    install_openbao,
    openbao_token_reviewer,
    set_up_openbao,
    vault_values,
)

DASHBOARD = CHART / "files" / "dashboard.json"
RATE_INTERVAL = "1m"  # Grafana's $__rate_interval, at least four scrapes of 3 s
FAST = {
    "metrics": {
        "prometheusRule": {
            "downFor": "10s",
            "pluginStaleFor": "10s",
            "vaultFailingFor": "10s",
            "embeddingBacklogWindow": "1m",
            "embeddingBacklogMin": 0,
        }
    }
}
PLUGIN = "weather"


def agent_pods(cluster: kube.Cluster, namespace: str) -> list[Any]:
    return list(cluster.core.list_namespaced_pod(namespace, label_selector=AGENT_SELECTOR).items)


def install(
    helm: kube.Helm, namespace: str, tmp_path: Path, values: list[Path], backends: list[Path]
) -> list[str]:
    """Backends (plugins seeded in the Git server), Prometheus, the release; alert names."""
    images_set = {
        "fakeLlm.image": images.ref("fake-llm"),
        "gitServer.image": images.ref("git-server"),
    }
    helm.install("backends", BACKENDS_CHART, values=backends, set_values=images_set, timeout="3m")
    alerts = prom.install_prometheus(helm, namespace, RELEASE, values, tmp_path)
    helm.install(RELEASE, CHART, values=values, timeout="8m")
    return alerts


def dashboard_queries(namespace: str) -> list[tuple[str, str]]:
    """(panel title, PromQL) of every target, Grafana's variables substituted."""
    board = json.loads(DASHBOARD.read_text())
    found = []
    for panel in board["panels"]:
        for target in panel.get("targets", []):
            expr = (
                target["expr"]
                .replace("$namespace", namespace)
                .replace("$release", FULLNAME)
                .replace("$__rate_interval", RATE_INTERVAL)
            )
            found.append((panel["title"], expr))
    return found


def variable_checks(namespace: str) -> list[tuple[str, str, str]]:
    """Each query variable's label_values(series, label) as a PromQL count by that label,
    and the value it must find (this namespace, this release)."""
    board = json.loads(DASHBOARD.read_text())
    wanted = {"namespace": namespace, "release": FULLNAME}
    checks = []
    for variable in board["templating"]["list"]:
        if variable["type"] != "query":
            continue
        inner = variable["definition"].removeprefix("label_values(").removesuffix(")")
        series, _, label = inner.rpartition(",")
        series = series.replace("$namespace", namespace)
        checks.append(
            (variable["name"], f"count by ({label.strip()}) ({series})", wanted[variable["name"]])
        )
    return checks


def check_dashboard(watch: prom.AlertWatch, namespace: str) -> list[str]:
    """What failed: a query that errors or answers nothing, a variable missing this release."""
    failures = []
    for title, expr in dashboard_queries(namespace):
        status, body = watch.query_status(expr)
        if status != 200 or body.get("status") != "success":
            failures.append(f"panel {title!r}: {expr} -> HTTP {status} {body.get('error')}")
        elif not body["data"]["result"]:
            failures.append(f"panel {title!r}: {expr} -> no data")
    for name, expr, value in variable_checks(namespace):
        values = {next(iter(r["metric"].values()), "") for r in watch.query(expr)}
        if value not in values:
            failures.append(f"variable {name}: {expr} -> {sorted(values)}, not {value}")
    return failures


@pytest.mark.timeout(1200)
def test_dashboard_answers_a_stale_plugin_alerts_and_a_down_agent_keeps_its_backup_alert(
    cluster: kube.Cluster,
    namespace: str,
    helm: kube.Helm,
    tmp_path: Path,
    git_sync_image: dict[str, Any],  # noqa: F811 (the fixture imported above)
) -> None:
    images.require(["agent", "fake-llm", "git-server", "seaweedfs", "prometheus", "busybox"])
    began = time.monotonic()
    storage.install_s3_on_a_volume(cluster, namespace, helm)
    plugins = agent_values(git_sync_image, [PLUGIN])
    embeddings = {"lcm": {"embeddings": {"mode": "static"}}}
    values = values_files(tmp_path, BACKUP_VALUES, FAST, plugins, embeddings)
    alerts = install(helm, namespace, tmp_path, values, [backends_values(tmp_path)])
    wanted = {"HermesPluginSyncStale", "HermesAgentDown", "HermesBackupMissing"}
    assert wanted <= set(alerts), alerts
    lib.start_load(cluster, namespace)
    failures: list[str] = []
    with kube.port_forward(cluster, namespace, "svc/prometheus", 9090) as port:
        watch = prom.AlertWatch(f"http://127.0.0.1:{port}")
        watch.wait_scraped(f"hermes_backup_last_run_success{{{JOB}}} == 1", timeout=300)
        watch.wait_scraped(f'hermes_runtime_plugin_linked{{{JOB},plugin="{PLUGIN}"}} == 1')
        lib.wait_answered(cluster, namespace, 0.0)
        watch.wait_scraped(f"increase(lcm_messages_ingested_total{{{JOB}}}[1m]) > 0")
        time.sleep(15)  # a few more scrapes: every rate window holds turns
        print(f"\ninstalled, backed up and chatting in {time.monotonic() - began:.0f} s")
        failures += check_dashboard(watch, namespace)
        quiet = watch.poll()
        if "HermesEmbeddingBacklogGrowing" in quiet:
            failures.append("HermesEmbeddingBacklogGrowing fires while the embedder keeps up")
        assert not wanted & set(quiet), quiet

        with git_remote(cluster, namespace, REPOS) as remote:
            pushed = time.time()
            remote.push(PLUGIN, plugin_files(PLUGIN, "2"), {"passwd": "/etc/passwd"})
        stale = watch.wait_for("HermesPluginSyncStale", "firing", 180)
        print(f"HermesPluginSyncStale firing {stale - pushed:.1f} s after the refused push")

        down = time.time()
        kube.kubectl(cluster, namespace, "scale", f"deployment/{FULLNAME}", "--replicas=0")
        kube.wait_until(lambda: not agent_pods(cluster, namespace), 180, "the agent pod to be gone")
        agent_down = watch.wait_for("HermesAgentDown", "firing", 120)
        missing = watch.wait_for("HermesBackupMissing", "firing", 300)
        gone = watch.query(f"hermes_runtime_uptime_seconds{{{JOB}}}")
        assert gone == [], f"the agent is still scraped: {gone}"
        print(
            f"agent scaled to 0: HermesAgentDown firing {agent_down - down:.1f} s after, "
            f"HermesBackupMissing {missing - down:.1f} s after"
        )
    assert not failures, "\n".join(failures)
    print(f"total {time.monotonic() - began:.0f} s")


@pytest.mark.timeout(900)
def test_failing_embeddings_fire_the_backlog_alert(
    cluster: kube.Cluster, namespace: str, helm: kube.Helm, tmp_path: Path
) -> None:
    images.require(["agent", "fake-llm", "git-server", "prometheus", "busybox"])
    began = time.monotonic()
    # A port of the fake LLM's Service that nothing serves: every embedding call fails.
    broken = {
        "backup": {"enabled": False},
        "lcm": {
            "embeddings": {
                "mode": "openai",
                "baseUrl": "http://fake-llm:9/v1",
                "model": "text-embedding-3-small",
                "dim": 64,
            }
        },
    }
    values = values_files(tmp_path, FAST, broken)
    alert = "HermesEmbeddingBacklogGrowing"
    assert alert in install(helm, namespace, tmp_path, values, [])
    lib.start_load(cluster, namespace)
    lib.wait_answered(cluster, namespace, 0.0)
    start = time.time()
    with kube.port_forward(cluster, namespace, "svc/prometheus", 9090) as port:
        watch = prom.AlertWatch(f"http://127.0.0.1:{port}")
        # LCM's port is up once the engine took its first turn.
        watch.wait_scraped(f"increase(lcm_messages_ingested_total{{{JOB}}}[1m]) > 0")
        firing = watch.wait_for(alert, "firing", 180)
        embedded = watch.query(f"lcm_embedded_items_total{{{JOB}}}")
        assert all(float(e["value"][1]) == 0 for e in embedded), embedded
    print(f"\n{alert} firing {firing - start:.1f} s after the first answered turn")
    print(f"total {time.monotonic() - began:.0f} s")


@pytest.mark.timeout(900)
def test_vault_down_fires_the_refresh_alert_and_it_clears_once_vault_is_back(
    cluster: kube.Cluster,
    namespace: str,
    helm: kube.Helm,
    tmp_path: Path,
    openbao_token_reviewer: str,  # noqa: F811 (the fixture imported above)
) -> None:
    images.require(["agent", "fake-llm", "git-server", "openbao", "prometheus"])
    began = time.monotonic()
    bao = install_openbao(cluster, namespace, helm, tmp_path)
    fields = {"LLM_API_KEY": "sk-" + secrets.token_hex(16)}  # the API key stays ci.yaml's
    set_up_openbao(cluster, namespace, bao, {AGENT_PATH: fields})
    vault = vault_values(ROLE, {AGENT_PATH: list(fields)})
    vault["vault"]["refresher"] = {"enabled": True, "interval": 5}
    values = values_files(tmp_path, {"backup": {"enabled": False}}, FAST, vault)
    alert = "HermesVaultRefreshFailing"
    assert alert in install(helm, namespace, tmp_path, values, [])
    with kube.port_forward(cluster, namespace, "svc/prometheus", 9090) as port:
        watch = prom.AlertWatch(f"http://127.0.0.1:{port}")
        watch.wait_scraped(f"hermes_runtime_secrets_refresh_ok{{{JOB}}} == 1", timeout=180)
        quiet = watch.poll()
        assert alert not in quiet, quiet
        print(f"\ninstalled and scraped in {time.monotonic() - began:.0f} s")
        down = vault_down(cluster, namespace)
        firing = watch.wait_for(alert, "firing", 180)
        back = vault_up(cluster, namespace, bao, fields)
        cleared = watch.wait_for(alert, "inactive", 180)
    print(
        f"Vault down: {alert} firing {firing - down:.1f} s after; "
        f"cleared {cleared - back:.1f} s after Vault was back"
    )
