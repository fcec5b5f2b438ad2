"""docs/gitops.md's Argo CD Application and Flux HelmRelease, tested by rendering.

A platform team copies these: their chart values must render (twice, the same bytes, as Argo
CD compares them) into objects the Kubernetes schemas accept, and the two wrappers must carry
the fields each controller needs."""

from __future__ import annotations

import re
from typing import Any

import yaml
from chart_testlib import REPO, template
from kubernetes_validate import validate

DOC = REPO / "docs" / "gitops.md"
BLOCK = re.compile(r"```yaml\n(.*?)```", re.DOTALL)


def documents() -> dict[str, dict[str, Any]]:
    """Every YAML object of the doc's code blocks, by kind."""
    found: dict[str, dict[str, Any]] = {}
    for block in BLOCK.findall(DOC.read_text()):
        for doc in yaml.safe_load_all(block):
            if doc:
                found[doc["kind"]] = doc
    return found


def rendered(values: dict[str, Any], name: str) -> list[dict[str, Any]]:
    first, second = template(values), template(values)
    assert first.returncode == 0, first.stderr
    assert first.stdout == second.stdout, f"{name}: two renders differ"
    return [doc for doc in yaml.safe_load_all(first.stdout) if doc]


def test_the_argo_cd_application_renders_and_keeps_what_argo_needs() -> None:
    app = documents()["Application"]
    source = app["spec"]["source"]
    assert source["path"] == "charts/hermes-agent"
    assert (REPO / source["path"] / "Chart.yaml").exists()
    assert app["spec"]["destination"]["namespace"]
    labels = app["spec"]["syncPolicy"]["managedNamespaceMetadata"]["labels"]
    assert labels["pod-security.kubernetes.io/enforce"] == "restricted"
    objects = rendered(source["helm"]["valuesObject"], "argo")
    for obj in objects:
        validate(obj, "1.34", strict=True)
    kinds = {obj["kind"] for obj in objects}
    assert "Secret" not in kinds  # every secret is the user's (existingSecret)
    jobs = [obj["metadata"]["name"] for obj in objects if obj["kind"] == "Job"]
    assert jobs == ["hermes-hermes-agent-pre-upgrade"]  # no secrets Job: nothing to make


def test_the_flux_helm_release_renders() -> None:
    docs = documents()
    release, source = docs["HelmRelease"], docs["GitRepository"]
    ref = release["spec"]["chart"]["spec"]["sourceRef"]
    assert (ref["kind"], ref["name"]) == ("GitRepository", source["metadata"]["name"])
    assert (REPO / release["spec"]["chart"]["spec"]["chart"] / "Chart.yaml").exists()
    assert release["spec"]["upgrade"]["remediation"]["remediateLastFailure"] is False
    objects = rendered(release["spec"]["values"], "flux")
    for obj in objects:
        validate(obj, "1.34", strict=True)
    jobs = sorted(obj["metadata"]["name"] for obj in objects if obj["kind"] == "Job")
    assert jobs == ["hermes-hermes-agent-pre-upgrade", "hermes-hermes-agent-secrets"]
