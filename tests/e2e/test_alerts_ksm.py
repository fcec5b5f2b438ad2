"""The alerts that read kube-state-metrics, fired live: the backup and verify CronJobs' own
series and git-sync's restart counter, which outlive every pod of the release.

kube-state-metrics (upstream's, built from the Go module proxy: ci/k8s/build-addons.sh,
tests/e2e/charts/kube-state-metrics) watches the test namespace and the real Prometheus of
tests/e2e/prometheus_testlib.py scrapes it beside the agent; the release tells its alerts to
select that job (`metrics.prometheusRule.kubeStateMetricsSelector`), as a user points them at
theirs.

- The repository password Secret holds an empty password (a secret store that synced
  nothing): every backup and every verify exits at once with "no password", before restic
  is started. The backup and verify CronJobs run every minute with no retry
  (`backoffLimit: 0`), so each Job fails within seconds and nothing of it stays active,
  which the alerts' "nothing running now" condition asks for. HermesVerifyFailed fires (it
  has no other source: the verify Job never mounts the data volume the agent's figures come
  from), and HermesBackupFailed and HermesBackupMissing fire from their CronJob parts too:
  each firing series checked carries the CronJob's name, which only kube-state-metrics'
  series have (the agent's own parts fire beside them, labelled by `job` and `pod`). The
  failed verify pod's log names the cause.
- Meanwhile the Git server of the release's one plugin is scaled to 0 once the plugin is
  linked: its git-sync fails `gitSync.maxFailures` fetches in a row, exits and is restarted
  by the kubelet, again and again, and HermesPluginSyncStale fires from kube-state-metrics'
  restart counter (labelled with the git-sync container; the link part stays quiet, as the
  agent keeps its last good commit).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from . import images, kube
from . import prometheus_testlib as prom
from .test_alerts import FULLNAME, JOB, values_files
from .test_scenario_conversation import BACKENDS_CHART, CHART, RELEASE
from .test_scenario_plugins import (  # noqa: F401 (git_sync_choice, git_sync_image: fixtures)
    agent_values,
    backends_values,
    git_sync_choice,
    git_sync_image,
)

IMAGES = ["agent", "fake-llm", "git-server", "prometheus", "kube-state-metrics"]
PASSWORD_SECRET = "empty-restic-password"
BACKUP_CRON = f"{FULLNAME}-backup"
VERIFY_CRON = f"{FULLNAME}-verify"
EVERY_MINUTE = "* * * * *"
FAILING = {
    "backup": {
        "mode": "cronjob",  # ci.yaml's, on a PVC target
        "schedule": EVERY_MINUTE,
        "interval": 60,  # the schema's minimum: HermesBackupMissing allows 120 s
        "backoffLimit": 0,  # one failed pod fails the Job: nothing stays active
        "repository": {"existingSecret": PASSWORD_SECRET},
        "verify": {"enabled": True, "schedule": EVERY_MINUTE},
        "prometheusRule": {"failedFor": "15s", "missingFor": "15s", "verifyFailedFor": "15s"},
    },
}
PLUGIN = "weather"
# The restart counter's window, and how long it must stay raised: a git-sync that keeps
# failing is restarted after the kubelet's growing back-off (10 s, 20 s, 40 s), so over a
# minute the count keeps rising.
PLUGIN_STALE = {"metrics": {"prometheusRule": {"pluginStaleFor": "1m"}}}
# Each alert, and matchers of labels only its kube-state-metrics part's series carry.
KSM_PARTS = [
    ("HermesVerifyFailed", f'cronjob="{VERIFY_CRON}"'),
    ("HermesBackupFailed", f'cronjob="{BACKUP_CRON}"'),
    ("HermesBackupMissing", f'cronjob="{BACKUP_CRON}"'),
    ("HermesPluginSyncStale", 'container=~"git-sync-.+"'),
]


def wait_firing(watch: prom.AlertWatch, alert: str, labels: str, timeout: float) -> float:
    """Poll until a series of ``alert`` with ``labels`` fires; the time it was first seen so."""
    expr = f'ALERTS{{alertname="{alert}",alertstate="firing",{labels}}}'
    kube.wait_until(lambda: bool(watch.query(expr)), timeout, f"{expr} to return", interval=1.0)
    return time.time()


def failed_pod_log(cluster: kube.Cluster, namespace: str, cronjob: str) -> str:
    """The log of a failed pod of one of ``cronjob``'s Jobs ("" while there is none)."""
    for pod in cluster.core.list_namespaced_pod(namespace).items:
        job = (pod.metadata.labels or {}).get("job-name", "")
        if job.startswith(f"{cronjob}-") and pod.status.phase == "Failed":
            return str(cluster.core.read_namespaced_pod_log(pod.metadata.name, namespace))
    return ""


def install(helm: kube.Helm, namespace: str, tmp_path: Path, values: list[Path]) -> list[str]:
    """kube-state-metrics, the backends (the plugin in the Git server), Prometheus scraping
    both exporters, the release; the alert names."""
    prom.install_kube_state_metrics(helm)
    backends = {
        "fakeLlm.image": images.ref("fake-llm"),
        "gitServer.image": images.ref("git-server"),
    }
    helm.install(
        "backends",
        BACKENDS_CHART,
        values=[backends_values(tmp_path)],
        set_values=backends,
        timeout="3m",
    )
    alerts = prom.install_prometheus(
        helm, namespace, RELEASE, values, tmp_path, kube_state_metrics=True
    )
    helm.install(RELEASE, CHART, values=values, timeout="5m")
    return alerts


@pytest.mark.timeout(480)
def test_failing_cronjobs_and_a_restarting_git_sync_fire_their_alerts_from_kube_state_metrics(
    cluster: kube.Cluster,
    namespace: str,
    helm: kube.Helm,
    tmp_path: Path,
    git_sync_image: dict[str, Any],  # noqa: F811 (the fixture imported above)
) -> None:
    images.require(IMAGES)
    began = time.monotonic()
    empty = client.V1Secret(
        metadata=client.V1ObjectMeta(name=PASSWORD_SECRET), string_data={"RESTIC_PASSWORD": ""}
    )
    cluster.core.create_namespaced_secret(namespace, empty)
    plugin = agent_values(git_sync_image, [PLUGIN])
    values = values_files(tmp_path, FAILING, prom.KSM_VALUES, PLUGIN_STALE, plugin)
    alerts = install(helm, namespace, tmp_path, values)
    assert {alert for alert, _ in KSM_PARTS} <= set(alerts), alerts
    installed = time.time()
    print(f"\ninstalled in {time.monotonic() - began:.0f} s")
    ksm = f'job="{prom.KSM_JOB}",namespace="{namespace}"'
    with kube.port_forward(cluster, namespace, "svc/prometheus", 9090) as port:
        watch = prom.AlertWatch(f"http://127.0.0.1:{port}")
        for cronjob in (BACKUP_CRON, VERIFY_CRON):
            watch.wait_scraped(f'kube_cronjob_created{{{ksm},cronjob="{cronjob}"}}')
        watch.wait_scraped(f'hermes_runtime_plugin_linked{{{JOB},plugin="{PLUGIN}"}} == 1')
        down = time.time()
        kube.kubectl(cluster, namespace, "scale", "deployment/git-server", "--replicas=0")
        firing = {alert: wait_firing(watch, alert, labels, 240) for alert, labels in KSM_PARTS}
        assert watch.query(f"kube_cronjob_status_last_successful_time{{{ksm}}}") == []
    log = failed_pod_log(cluster, namespace, VERIFY_CRON)
    assert "no password" in log, f"the failed verify pod's log does not name the cause:\n{log}"
    stale = firing.pop("HermesPluginSyncStale")
    print(
        "firing from kube-state-metrics after the install: "
        + ", ".join(f"{alert} {seen - installed:.1f} s" for alert, seen in firing.items())
        + f"; HermesPluginSyncStale {stale - down:.1f} s after the Git server went down"
    )
    print(f"total {time.monotonic() - began:.0f} s")
