"""The chart's PrometheusRules rendered by helm and run through real promtool.

``rules(values)`` renders both PrometheusRules with the monitoring API present and both
turned on; ``run_promtool`` checks the rule file (`promtool check rules`) and then runs the
unit tests given (`promtool test rules`), failing with promtool's own output. ``expected``
builds an alert as promtool must report it: the rule's labels plus the series', and its
annotations with every `{{ $labels.x }}` and the given `{{ $value ... }}` templates expanded
(a label the alert does not carry expands to nothing, as in Prometheus).
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml
from chart_testlib import CHART, FULLNAME, NAMESPACE, RELEASE, REPO, run_helm

RULE_API = "monitoring.coreos.com/v1/PrometheusRule"
ON = {
    "metrics": {"prometheusRule": {"enabled": True}},
    "backup": {"prometheusRule": {"enabled": True}},
}
AGENT = {"job": FULLNAME, "namespace": NAMESPACE, "pod": f"{FULLNAME}-7c9d5b8f6d-x2x9k"}
OTHER = {"job": "another-agent", "namespace": NAMESPACE, "pod": "another-agent-0"}
KSM = {"job": "kube-state-metrics", "namespace": NAMESPACE}
LABEL_TEMPLATE = re.compile(r"\{\{ \$labels\.([A-Za-z_]+) \}\}")


def merge(base: Mapping[str, Any], extra: Mapping[str, Any]) -> dict[str, Any]:
    """``extra`` over ``base``, nested mappings merged (as helm merges values files)."""
    out = dict(base)
    for key, value in extra.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = merge(out[key], value)
        else:
            out[key] = value
    return out


def render_rules(values: Mapping[str, Any] | None = None, api: bool = True) -> list[dict]:
    """The PrometheusRule objects of a render with ``values`` (over both rules turned on)."""
    args = ["template", RELEASE, str(CHART), "--namespace", NAMESPACE]
    args += ["--show-only", "templates/prometheusrule.yaml"]
    if api:
        args += ["--api-versions", RULE_API]
    with tempfile.TemporaryDirectory(prefix="chart-values-") as scratch:
        path = Path(scratch) / "values.json"
        path.write_text(json.dumps(merge(ON, values or {})), encoding="utf-8")
        result = run_helm([*args, "-f", str(path)])
    if result.returncode != 0 and "could not find template" in result.stderr:
        return []  # --show-only of a template that rendered nothing
    assert result.returncode == 0, result.stderr
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc]


def named(docs: list[dict], name: str) -> dict:
    (rule,) = [d for d in docs if d["metadata"]["name"] == name]
    return rule


def backup_rule(values: Mapping[str, Any] | None = None) -> dict:
    return named(render_rules(values), f"{FULLNAME}-backup")


def agent_rule(values: Mapping[str, Any] | None = None) -> dict:
    return named(render_rules(values), FULLNAME)


def by_alert(rule: dict) -> dict[str, dict]:
    return {r["alert"]: r for g in rule["spec"]["groups"] for r in g["rules"]}


def promtool() -> str:
    """Debian's promtool (package `prometheus` 2.42), installed like every system package."""
    if shutil.which("promtool") is None:
        subprocess.run([str(REPO / "ci" / "install-system-deps.sh")], check=True)
    found = shutil.which("promtool")
    assert found, "promtool missing after ci/install-system-deps.sh (Debian package prometheus)"
    return found


def series(name: str, labels: Mapping[str, str], values: str) -> dict[str, str]:
    matchers = ",".join(f'{k}="{v}"' for k, v in labels.items())
    return {"series": f"{name}{{{matchers}}}", "values": values}


def expected(
    rule: dict, labels: Mapping[str, str], value: Mapping[str, str] | None = None
) -> dict[str, Any]:
    """The alert as promtool must see it; ``value`` maps each `{{ $value | ... }}` of the
    annotations to its expected text."""

    def expand(text: str) -> str:
        text = LABEL_TEMPLATE.sub(lambda m: labels.get(m.group(1), ""), text)
        for template, shown in (value or {}).items():
            text = text.replace(template, shown)
        return text

    return {
        "exp_labels": {**labels, **rule["labels"]},
        "exp_annotations": {k: expand(v) for k, v in rule["annotations"].items()},
    }


def at(minutes: int, alert: str, fired: list[dict]) -> dict[str, Any]:
    return {"eval_time": f"{minutes}m", "alertname": alert, "exp_alerts": fired}


def case(input_series: list[dict], checks: list[dict]) -> dict[str, Any]:
    return {"interval": "1m", "input_series": input_series, "alert_rule_test": checks}


def run_promtool(tmp_path: Path, rule: dict, tests: list[dict]) -> str:
    """`promtool check rules` then `promtool test rules`; their output (asserted to pass)."""
    tool = promtool()
    rules_file = tmp_path / "rules.yaml"
    rules_file.write_text(yaml.safe_dump({"groups": rule["spec"]["groups"]}))
    check = subprocess.run(
        [tool, "check", "rules", str(rules_file)], capture_output=True, text=True
    )
    assert check.returncode == 0, check.stdout + check.stderr
    tests_file = tmp_path / "tests.yaml"
    tests_file.write_text(
        yaml.safe_dump(
            {"rule_files": [rules_file.name], "evaluation_interval": "1m", "tests": tests}
        )
    )
    run = subprocess.run([tool, "test", "rules", str(tests_file)], capture_output=True, text=True)
    assert run.returncode == 0, run.stdout + run.stderr
    return check.stdout + run.stdout
