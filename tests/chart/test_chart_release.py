"""The release workflow publishes the image the chart pulls, and the chart it packages."""

from __future__ import annotations

import yaml
from chart_testlib import CHART, REPO

WORKFLOW = REPO / ".github" / "workflows" / "release.yaml"


def _workflow() -> dict:
    return yaml.safe_load(WORKFLOW.read_text(encoding="utf-8"))


def test_image_pushed_is_the_repository_the_chart_pulls() -> None:
    values = yaml.safe_load((CHART / "values.yaml").read_text(encoding="utf-8"))
    image_env = _workflow()["jobs"]["image"]["env"]
    assert image_env["IMAGE"].endswith("/" + values["image"]["repository"]), image_env
    # Tagged with appVersion: the chart's default tag.
    assert values["image"]["tag"] == ""
    assert "app-version" in image_env["TAG"]


def test_image_is_multi_arch_signed_with_sbom_and_chart_pushed_as_oci() -> None:
    jobs = _workflow()["jobs"]
    build = next(s for s in jobs["image"]["steps"] if s.get("id") == "build")
    assert set(build["with"]["platforms"].split(",")) == {"linux/amd64", "linux/arm64"}
    image_runs = " ".join(s.get("run", "") for s in jobs["image"]["steps"])
    assert "cosign sign" in image_runs and "cosign attest" in image_runs
    assert jobs["image"]["permissions"]["id-token"] == "write"
    chart_runs = " ".join(s.get("run", "") for s in jobs["chart"]["steps"])
    assert "helm package" in chart_runs and "helm push" in chart_runs
    assert jobs["chart"]["env"]["CHART_REPO"].startswith("oci://")
    assert "cosign sign" in chart_runs
