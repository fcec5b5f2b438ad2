"""A real Prometheus in the test namespace, set up from the chart's own monitoring objects.

Why no prometheus-operator: no registry serves it here. What the operator would do with the
chart's objects is small and done here instead, so the objects a user's operator reads are
what this Prometheus runs:

- the ServiceMonitor becomes the scrape config and targets the operator would make of it
  (the endpoints of the namespace's Services with its labels, on its port, `job` from the
  Service label it names as jobLabel, `namespace`/`pod`/`service`); Debian's Prometheus is
  built without kubernetes_sd_configs, so a sidecar of tests/e2e/charts/prometheus writes
  those targets as file_sd;
- the PrometheusRule objects' groups become one rules file.

With `kube_state_metrics` it also scrapes kube-state-metrics (tests/e2e/charts/
kube-state-metrics, upstream's exporter watching the test namespace) as the static job
`kube-state-metrics`, the label the alerts' kube-state-metrics parts are told to select
(`KSM_VALUES`).

Both are rendered with `helm template` from the same values as the release (the cluster has
no monitoring.coreos.com API, so the install itself renders neither). Prometheus (Debian's
2.42, tests/e2e/charts/prometheus) then scrapes the agent through the chart's NetworkPolicy,
which lets the metrics ports in from `networkPolicy.ingress.metricsFrom` only: the values set
it to this Prometheus pod.

`AlertWatch` polls Prometheus' /api/v1/alerts through a port-forward and remembers when each
alert was first seen pending and firing, which the figures (time to detect) come from.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import yaml

from . import images, kube

CHART = kube.REPO_ROOT / "charts" / "hermes-agent"
PROMETHEUS_CHART = Path(__file__).parent / "charts" / "prometheus"
KSM_CHART = Path(__file__).parent / "charts" / "kube-state-metrics"
KSM_JOB = "kube-state-metrics"
# What the release's values need so its alerts read these kube-state-metrics series.
KSM_VALUES = {"metrics": {"prometheusRule": {"kubeStateMetricsSelector": f'job="{KSM_JOB}"'}}}
MONITORING_APIS = (
    "monitoring.coreos.com/v1/ServiceMonitor",
    "monitoring.coreos.com/v1/PrometheusRule",
)
PROMETHEUS_LABELS = {"app": "prometheus"}  # tests/e2e/charts/prometheus
# What the agent's values need so this Prometheus may scrape it, at a pace a test can wait on.
SCRAPE_INTERVAL = "3s"
EVALUATION_INTERVAL = "3s"


def monitoring_values() -> dict[str, Any]:
    """Values of the hermes-agent release: a fast ServiceMonitor, this Prometheus let in.

    `serviceMonitor.enabled` and both `prometheusRule.enabled` stay off for the install (the
    chart refuses them on a cluster without the API); `render_monitoring` turns them on, as
    on an operator's cluster."""
    return {
        "metrics": {
            "serviceMonitor": {
                "interval": SCRAPE_INTERVAL,
                "scrapeTimeout": SCRAPE_INTERVAL,
            }
        },
        "networkPolicy": {
            "ingress": {"metricsFrom": [{"podSelector": {"matchLabels": PROMETHEUS_LABELS}}]}
        },
    }


def render_monitoring(
    helm: kube.Helm, release: str, values: list[Path]
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The release's ServiceMonitors and PrometheusRules as an operator's cluster gets them."""
    args = ["template", release, str(CHART)]
    for path in values:
        args += ["--values", str(path)]
    for api in MONITORING_APIS:
        args += ["--api-versions", api]
    args += ["--set", "metrics.serviceMonitor.enabled=true"]
    args += ["--set", "metrics.prometheusRule.enabled=true"]
    args += ["--set", "backup.prometheusRule.enabled=true"]
    docs = [d for d in yaml.safe_load_all(helm.run(*args, timeout=120)) if d]
    monitors = [d for d in docs if d["kind"] == "ServiceMonitor"]
    rules = [d for d in docs if d["kind"] == "PrometheusRule"]
    assert monitors, "the chart rendered no ServiceMonitor with metrics.serviceMonitor.enabled"
    assert rules, "the chart rendered no PrometheusRule"
    return monitors, rules


def scrape_jobs(
    monitor: dict[str, Any], namespace: str
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The scrape configs for each endpoint of ``monitor`` and the discovery sidecar's jobs.

    What prometheus-operator generates for it, the parts a ServiceMonitor of this chart uses:
    the Services of the namespace with the selector's labels, the endpoint port by name, every
    address of their EndpointSlices (not-ready ones too), `job` from the jobLabel's Service
    label, `namespace`/`service`/`pod`/`endpoint` labels, the endpoint's path, interval and
    timeout. Debian's Prometheus lacks kubernetes_sd_configs: the sidecar writes the targets.
    """
    spec = monitor["spec"]
    assert spec["namespaceSelector"]["matchNames"] == [namespace], spec["namespaceSelector"]
    configs, jobs = [], []
    for index, endpoint in enumerate(spec["endpoints"]):
        name = f"serviceMonitor/{namespace}/{monitor['metadata']['name']}/{index}"
        targets = f"/sd/{monitor['metadata']['name']}-{index}.json"
        jobs.append(
            {
                "file": targets,
                "selector": spec["selector"]["matchLabels"],
                "port": endpoint["port"],
                "jobLabel": spec.get("jobLabel", ""),
            }
        )
        configs.append(
            {
                "job_name": name,
                "metrics_path": endpoint.get("path", "/metrics"),
                "scrape_interval": endpoint["interval"],
                "scrape_timeout": endpoint["scrapeTimeout"],
                "file_sd_configs": [{"files": [targets], "refresh_interval": "5s"}],
            }
        )
    return configs, jobs


def ksm_scrape_config(namespace: str) -> dict[str, Any]:
    """The static scrape job of kube-state-metrics' Service.

    `honor_labels`, as kube-state-metrics' own ServiceMonitors set it: its series carry the
    `namespace`, `pod` and `container` of the objects they describe, which must win over any
    target label of the same name (renamed `exported_*` otherwise, and the alerts' selectors
    would find nothing)."""
    return {
        "job_name": KSM_JOB,
        "honor_labels": True,
        "scrape_interval": SCRAPE_INTERVAL,
        "scrape_timeout": SCRAPE_INTERVAL,
        "static_configs": [{"targets": [f"{KSM_JOB}.{namespace}.svc:8080"]}],
    }


def install_kube_state_metrics(helm: kube.Helm) -> None:
    """kube-state-metrics watching the test namespace's CronJobs, Jobs and Pods."""
    image = {"image": images.ref("kube-state-metrics")}
    helm.install("kube-state-metrics", KSM_CHART, set_values=image, timeout="3m")


def install_prometheus(
    helm: kube.Helm,
    namespace: str,
    release: str,
    values: list[Path],
    tmp_path: Path,
    *,
    kube_state_metrics: bool = False,
) -> list[str]:
    """Prometheus scraping ``release`` (and kube-state-metrics when asked) and evaluating its
    rules; returns the alert names."""
    monitors, rules = render_monitoring(helm, release, values)
    configs, jobs = [], []
    for monitor in monitors:
        more_configs, more_jobs = scrape_jobs(monitor, namespace)
        configs += more_configs
        jobs += more_jobs
    if kube_state_metrics:
        configs.append(ksm_scrape_config(namespace))
    config = {
        "global": {
            "scrape_interval": SCRAPE_INTERVAL,
            "evaluation_interval": EVALUATION_INTERVAL,
        },
        "rule_files": ["/etc/prometheus/rules.yml"],
        "scrape_configs": configs,
    }
    groups = [g for rule in rules for g in rule["spec"]["groups"]]
    chart_values = {
        "image": images.ref("prometheus"),
        "discoveryImage": images.ref("agent"),
        "config": yaml.safe_dump(config, sort_keys=False),
        "rules": yaml.safe_dump({"groups": groups}, sort_keys=False),
        "discovery": json.dumps({"jobs": jobs}),
    }
    path = tmp_path / "prometheus-values.yaml"
    path.write_text(yaml.safe_dump(chart_values, sort_keys=False))
    helm.install("prometheus", PROMETHEUS_CHART, values=[path], timeout="3m")
    return [r["alert"] for g in groups for r in g["rules"]]


@dataclass
class AlertWatch:
    """Prometheus' alerts over time, through a port-forward kept open by the test.

    ``seen[(alert, state)]`` is the wall-clock time an alert was first seen in that state
    (pending or firing) since the last ``forget``; ``gone[alert]`` when it was first seen
    absent again after that.
    """

    base_url: str
    seen: dict[tuple[str, str], float] = field(default_factory=dict)
    gone: dict[str, float] = field(default_factory=dict)
    last: dict[str, str] = field(default_factory=dict)

    def poll(self) -> dict[str, str]:
        """Alert name -> state now (firing wins over pending when several series exist)."""
        url = f"{self.base_url}/api/v1/alerts"
        answer = kube.with_transport_retries(
            "prometheus alerts", lambda: httpx.get(url, timeout=10)
        )
        assert answer.status_code == 200, answer.text
        now = time.time()
        states: dict[str, str] = {}
        for alert in answer.json()["data"]["alerts"]:
            name, state = alert["labels"]["alertname"], alert["state"]
            if states.get(name) != "firing":
                states[name] = state
        for name, state in states.items():
            self.seen.setdefault((name, state), now)
        for name in set(self.last) - set(states):
            self.gone.setdefault(name, now)
        self.last = states
        return states

    def forget(self, alert: str) -> None:
        """Start over for ``alert`` (a new fault of the same kind)."""
        for key in [k for k in self.seen if k[0] == alert]:
            del self.seen[key]
        self.gone.pop(alert, None)

    def wait_for(self, alert: str, state: str, timeout: float) -> float:
        """Poll until ``alert`` is in ``state`` ("pending", "firing" or "inactive"); the time
        it was first seen so."""

        def reached() -> bool:
            states = self.poll()
            if state == "inactive":
                return alert not in states
            return (alert, state) in self.seen

        kube.wait_until(reached, timeout, f"alert {alert} {state}", interval=1.0)
        if state == "inactive":
            return self.gone.get(alert, time.time())
        return self.seen[(alert, state)]

    def query(self, expr: str) -> list[dict[str, Any]]:
        """An instant PromQL query's result vector."""
        url = f"{self.base_url}/api/v1/query"
        answer = kube.with_transport_retries(
            "prometheus query", lambda: httpx.get(url, params={"query": expr}, timeout=10)
        )
        assert answer.status_code == 200, answer.text
        return list(answer.json()["data"]["result"])

    def query_status(self, expr: str) -> tuple[int, dict[str, Any]]:
        """An instant query's HTTP status and body, an error included (a bad expression)."""
        url = f"{self.base_url}/api/v1/query"
        answer = kube.with_transport_retries(
            "prometheus query", lambda: httpx.get(url, params={"query": expr}, timeout=10)
        )
        return answer.status_code, dict(answer.json())

    def wait_scraped(self, expr: str, timeout: float = 120) -> list[dict[str, Any]]:
        """Poll until ``expr`` returns a sample (the target is up and scraped)."""
        found: list[dict[str, Any]] = []

        def present() -> bool:
            found[:] = self.query(expr)
            return bool(found)

        kube.wait_until(present, timeout, f"prometheus to return {expr}", interval=1.0)
        return found


def values_file(tmp_path: Path, name: str, values: dict[str, Any]) -> Path:
    """JSON is YAML: one file per values set, kept with the test's tmp_path."""
    path = tmp_path / name
    path.write_text(yaml.safe_dump(values, sort_keys=False))
    return path
