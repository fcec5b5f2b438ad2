"""The chart's Grafana dashboard: generated (ci/gen-dashboard.py) and committed alike, shipped
in an opt-in ConfigMap for Grafana's sidecar, laid out as Grafana's dashboard model wants,
and built only on metrics docs/metrics.md lists (the live queries: tests/e2e)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

from alerts_testlib import by_alert, render_rules
from chart_testlib import CHART, FULLNAME, REPO, render

GENERATOR = REPO / "ci" / "gen-dashboard.py"
DASHBOARD = CHART / "files" / "dashboard.json"
METRIC = re.compile(r"\b((?:hermes|lcm)_[a-z0-9_]+)")


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(GENERATOR), *args], capture_output=True, text=True, timeout=60
    )


def test_committed_dashboard_is_the_generated_one(tmp_path: Path) -> None:
    assert run("--check").returncode == 0, "charts/hermes-agent/files/dashboard.json is stale"
    stale = tmp_path / "dashboard.json"
    stale.write_text(DASHBOARD.read_text().replace("Hermes agent", "Hermes"))
    result = run("--check", "--output", str(stale))
    assert result.returncode == 1
    assert "out of date" in result.stderr


def test_configmap_is_opt_in_and_labelled_for_the_sidecar() -> None:
    assert not [
        c for c in render().all("ConfigMap") if c["metadata"]["name"].endswith("-dashboard")
    ]
    manifest = render(
        {
            "metrics": {
                "dashboard": {
                    "enabled": True,
                    "label": "grafana.example/dashboard",
                    "labelValue": "hermes",
                    "annotations": {"grafana_folder": "Hermes"},
                }
            }
        }
    )
    config = manifest.one("ConfigMap", f"{FULLNAME}-dashboard")
    assert config["metadata"]["labels"]["grafana.example/dashboard"] == "hermes"
    assert config["metadata"]["annotations"]["grafana_folder"] == "Hermes"
    assert json.loads(config["data"]["hermes-agent.json"]) == json.loads(DASHBOARD.read_text())
    default = render({"metrics": {"dashboard": {"enabled": True}}})
    labels = default.one("ConfigMap", f"{FULLNAME}-dashboard")["metadata"]["labels"]
    assert labels["grafana_dashboard"] == "1"


def test_dashboard_follows_grafanas_model() -> None:
    board = json.loads(DASHBOARD.read_text())
    assert board["uid"] == "hermes-agent" and isinstance(board["schemaVersion"], int)
    names = [v["name"] for v in board["templating"]["list"]]
    assert names == ["datasource", "namespace", "release"]
    ids = [p["id"] for p in board["panels"]]
    assert len(ids) == len(set(ids)), "panel ids must be unique"
    for panel in board["panels"]:
        grid = panel["gridPos"]
        assert grid["x"] + grid["w"] <= 24 and grid["h"] > 0, panel["title"]
        if panel["type"] == "row":
            continue
        assert panel["type"] in {"timeseries", "stat"}, panel["type"]
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
        assert panel["targets"], panel["title"]
        refs = [t["refId"] for t in panel["targets"]]
        assert len(refs) == len(set(refs)), panel["title"]
        assert all(t["expr"] for t in panel["targets"]), panel["title"]
    fleet = [p for p in board["panels"] if p["title"].startswith("Fleet")]
    assert fleet, "no fleet row"


def test_dashboard_and_alerts_read_only_documented_metrics() -> None:
    """Every hermes_/lcm_ series the dashboard or an alert reads is in docs/metrics.md (a
    histogram by its base name)."""
    documented = set(METRIC.findall((REPO / "docs" / "metrics.md").read_text()))
    exprs = [
        t["expr"] for p in json.loads(DASHBOARD.read_text())["panels"] for t in p.get("targets", [])
    ]
    exprs += [r["expr"] for doc in render_rules() for r in by_alert(doc).values()]
    used = {m for expr in exprs for m in METRIC.findall(expr)}
    used = {re.sub(r"_(bucket|sum|count)$", "", m) for m in used}
    assert used - documented == set(), used - documented
