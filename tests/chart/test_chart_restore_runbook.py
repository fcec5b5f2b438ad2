"""The restore runbook's shell pod (docs/restore-pod.yaml) works in a "restricted" namespace.

Issue 13: the old runbook started a pod with `--image-pull-policy=Never` and no security
context, which a namespace enforcing Pod Security "restricted" (the chart's default)
rejects. The runbook's own sed line is run here, exactly as written in docs/backup.md,
and its output is checked against the restricted rules, Kubernetes' schemas and the
names of the PVCs the chart really makes.
"""

from __future__ import annotations

import os
import subprocess

import pytest
import yaml
from chart_testlib import FULLNAME, NEWEST_KUBE, OLDEST_KUBE, REPO, render
from kubernetes_validate import validate
from pss import restricted_violations

RUNBOOK = REPO / "docs" / "backup.md"
MANIFEST = REPO / "docs" / "restore-pod.yaml"
IMAGE = "registry.example.com/hermes-runtime/agent:0.1.0"


def _runbook() -> str:
    text = RUNBOOK.read_text(encoding="utf-8")
    return text.split("## Runbook: restoring an agent", 1)[1].split("\n## ", 1)[0]


def _sed_line() -> str:
    (line,) = {ln for ln in _runbook().splitlines() if ln.startswith("sed -e ")}
    command, apply = line.split(" | ", 1)
    assert apply.startswith("kubectl -n $NS apply -f -"), apply
    return command


def _rendered_pod(extra_sed: str = "") -> dict:
    """The pod the runbook applies, produced by its sed line in a real shell."""
    done = subprocess.run(
        ["bash", "-c", _sed_line() + extra_sed],
        cwd=REPO,
        env={**os.environ, "FULL": FULLNAME, "IMAGE": IMAGE},
        capture_output=True,
        text=True,
        check=True,
    )
    return yaml.safe_load(done.stdout)


@pytest.mark.parametrize("target", ["pvc", "s3"])
def test_runbook_pod_passes_restricted_and_validates(target: str) -> None:
    pod = _rendered_pod(" -e '/backup PVC/d'" if target == "s3" else "")
    assert restricted_violations(pod["spec"]) == []
    for kube in (OLDEST_KUBE, NEWEST_KUBE):
        validate(pod, ".".join(kube.split(".")[:2]), strict=True)
    (shell,) = pod["spec"]["containers"]
    assert shell["image"] == IMAGE
    assert shell["imagePullPolicy"] == "IfNotPresent"
    volumes = {v["name"] for v in pod["spec"]["volumes"]}
    assert volumes == ({"data", "tmp", "backup"} if target == "pvc" else {"data", "tmp"})


def test_runbook_pod_mounts_the_claims_the_chart_makes() -> None:
    pod = _rendered_pod()
    claims = {
        v["name"]: v["persistentVolumeClaim"]["claimName"]
        for v in pod["spec"]["volumes"]
        if "persistentVolumeClaim" in v
    }
    made = {c["metadata"]["name"] for c in render().all("PersistentVolumeClaim")}
    assert set(claims.values()) == made, (claims, made)
    assert pod["metadata"]["name"] == f"{FULLNAME}-restore-shell"
    mounts = {m["name"]: m for m in pod["spec"]["containers"][0]["volumeMounts"]}
    assert mounts["data"]["mountPath"] == "/opt/data"
    assert mounts["backup"]["readOnly"] is True


def test_runbook_pod_is_not_taken_for_the_agent() -> None:
    """Neither the agent Service nor a chart NetworkPolicy may select the shell pod."""
    labels = _rendered_pod()["metadata"]["labels"]
    manifest = render({"networkPolicy": {"enabled": True}})
    selectors = [s["spec"]["selector"] for s in manifest.all("Service")]
    selectors += [p["spec"]["podSelector"]["matchLabels"] for p in manifest.all("NetworkPolicy")]
    for selector in selectors:
        assert not selector.items() <= labels.items(), selector


def test_runbook_uses_the_manifest_and_no_local_only_pull_policy() -> None:
    runbook = _runbook()
    assert "docs/restore-pod.yaml" in runbook
    assert "Never" not in runbook.replace("Pod Security", "")
    assert "restore.fromSnapshot" in runbook
    assert MANIFEST.exists()
