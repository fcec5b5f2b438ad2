"""The fleet pattern of values-examples/fleet/: many agents from one source.

Each agent is a folder, ``agents/<name>/agent.yaml`` (its release and namespace) beside its
``values.yaml``; ``common.yaml`` holds what the fleet shares. The Argo CD ApplicationSet and the
helmfile install the same agents with the same values files in the same order, and the fleet
they render is valid, passes Pod Security "restricted", and has no two objects, agents or
backup minutes alike, though every agent shares one bucket, prefix and password.
"""

from __future__ import annotations

import glob
from collections import Counter
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import yaml
from chart_testlib import (
    CHART,
    EXAMPLES,
    NEWEST_KUBE,
    Manifest,
    all_containers,
    env_map,
    pod_specs,
    render,
)
from kubernetes_validate import validate
from pss import restricted_violations

FLEET = EXAMPLES / "fleet"
REPO = EXAMPLES.parent


def read(path: Path) -> Any:
    return yaml.safe_load(path.read_text(encoding="utf-8"))


@cache
def agents() -> dict[str, dict[str, str]]:
    """folder name -> {release, namespace}, from every agents/*/agent.yaml."""
    found = {}
    for path in sorted((FLEET / "agents").glob("*/agent.yaml")):
        found[path.parent.name] = read(path)["agent"]
    return found


def values_files(folder: str) -> tuple[str, ...]:
    """The example names (under values-examples/) of an agent's values, common first."""
    return ("fleet/common", f"fleet/agents/{folder}/values")


@cache
def fleet_render(folder: str) -> Manifest:
    agent = agents()[folder]
    return render(
        examples=values_files(folder), release=agent["release"], namespace=agent["namespace"]
    )


def test_the_fleet_has_agents_sharing_a_namespace_and_in_namespaces_of_their_own() -> None:
    found = agents()
    assert len(found) >= 3
    assert all(a["release"] == folder for folder, a in found.items())  # a folder per release
    per_namespace = Counter(a["namespace"] for a in found.values())
    assert max(per_namespace.values()) >= 2 and len(per_namespace) >= 2


def test_the_helmfile_installs_exactly_the_agents_with_their_values_in_order() -> None:
    helmfile = read(FLEET / "helmfile.yaml")
    releases = {r["name"]: r for r in helmfile["releases"]}
    assert len(releases) == len(helmfile["releases"])
    assert {(r["name"], r["namespace"]) for r in releases.values()} == {
        (a["release"], a["namespace"]) for a in agents().values()
    }
    for folder, agent in agents().items():
        release = releases[agent["release"]]
        assert (FLEET / release["chart"]).resolve() == CHART
        assert release["values"] == [
            f"{v.removeprefix('fleet/')}.yaml" for v in values_files(folder)
        ]


def test_the_applicationset_finds_every_agent_and_names_files_that_exist() -> None:
    appset = read(FLEET / "applicationset.yaml")
    (generator,) = appset["spec"]["generators"]
    (pattern,) = [f["path"] for f in generator["git"]["files"]]
    assert sorted(glob.glob(str(REPO / pattern))) == sorted(
        str(FLEET / "agents" / folder / "agent.yaml") for folder in agents()
    )
    source = appset["spec"]["template"]["spec"]["source"]
    assert (REPO / source["path"]).resolve() == CHART
    helm = source["helm"]
    assert helm["releaseName"] == "{{ .agent.release }}"
    assert (
        appset["spec"]["template"]["spec"]["destination"]["namespace"] == "{{ .agent.namespace }}"
    )
    for folder in agents():
        # Argo CD's git files generator: .path.path is the folder of the matched file.
        folder_path = f"values-examples/fleet/agents/{folder}"
        files = [v.replace("{{ .path.path }}", folder_path) for v in helm["valueFiles"]]
        resolved = [(REPO / source["path"] / f).resolve() for f in files]
        assert resolved == [EXAMPLES / f"{v}.yaml" for v in values_files(folder)]


@pytest.mark.parametrize("folder", sorted(agents()))
def test_each_agent_renders_valid_and_restricted(folder: str) -> None:
    manifest = fleet_render(folder)
    for obj in manifest.objects:
        validate(obj, ".".join(NEWEST_KUBE.split(".")[:2]), strict=True)
        assert (
            obj["metadata"].get("namespace", agents()[folder]["namespace"])
            == agents()[folder]["namespace"]
        )
    pods = list(pod_specs(manifest))
    assert pods
    for where, pod in pods:
        assert restricted_violations(pod) == [], (folder, where)


def test_the_fleet_shares_no_object_agent_or_backup_minute() -> None:
    objects: Counter[tuple[str, str, str]] = Counter()
    agent_names, minutes = {}, {}
    for folder, agent in agents().items():
        manifest = fleet_render(folder)
        for obj in manifest.objects:
            objects[(agent["namespace"], obj["kind"], obj["metadata"]["name"])] += 1
        (agent_names[folder],) = {
            env_map(c)["HERMES_RUNTIME_AGENT"]
            for _, pod in pod_specs(manifest)
            for c in all_containers(pod)
            if "HERMES_RUNTIME_AGENT" in env_map(c)
        }
        backup = next(
            o for o in manifest.all("CronJob") if o["metadata"]["name"].endswith("-backup")
        )
        minutes[folder] = backup["spec"]["schedule"]
    assert [key for key, count in objects.items() if count > 1] == []
    assert agent_names == {f: f"{a['namespace']}.{a['release']}" for f, a in agents().items()}
    assert len(set(minutes.values())) == len(minutes), minutes
    # One bucket, prefix and password for all (the agents above keep them apart): no agent
    # sets a target or password of its own.
    for folder in agents():
        own = read(FLEET / "agents" / folder / "values.yaml").get("backup", {})
        assert "target" not in own and "repository" not in own, folder
