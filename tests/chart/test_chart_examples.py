"""Every values example (and the defaults) renders, lints, validates and passes Pod Security.

Each render is checked against the oldest and the newest Kubernetes we support: the
oldest gets legacy sidecars ("auto" mode), the newest native ones.
"""

from __future__ import annotations

import itertools
from typing import Any

import pytest
import yaml
from chart_testlib import (
    CHART,
    EXAMPLE_NAMES,
    EXAMPLES,
    NEWEST_KUBE,
    OLDEST_KUBE,
    all_containers,
    pod_specs,
    render,
    run_helm,
    template,
)
from kubernetes_validate import validate
from kubernetes_validate.utils import ValidationError
from pss import restricted_violations

# ServiceMonitor is a prometheus-operator CRD: no upstream Kubernetes schema exists for it.
CRD_GROUPS = ("monitoring.coreos.com/",)
KUBES = [OLDEST_KUBE, NEWEST_KUBE]

# Every optional feature at once, on top of production.yaml: the combinations must hold too.
KITCHEN_SINK: dict[str, Any] = {
    "sidecarMode": "auto",
    "persistence": {"accessModes": ["ReadWriteOncePod"]},
    "backup": {"mode": "sidecar", "interval": 600},
    "restore": {"fromSnapshot": "latest"},
    "plugins": [
        {
            "name": "weather",
            "repo": "https://git.example.com/w.git",
            "auth": {"existingSecret": "g"},
        },
        {
            "name": "tickets",
            "repo": "git@git.example.com:t.git",
            "auth": {"sshKeySecret": "k", "knownHosts": "git.example.com ssh-ed25519 AAAA"},
        },
    ],
    "hermes": {"soul": "Be brief.", "config": {"agent": {"max_turns": 5}}},
    "podDisruptionBudget": {"enabled": True},
    "allPods": {"extraEnv": [{"name": "TEAM", "value": "blue"}], "podLabels": {"team": "blue"}},
    "agent": {
        "extraInitContainers": [],
        "hostAliases": [{"ip": "10.0.0.9", "hostnames": ["llm.internal"]}],
        "topologySpreadConstraints": [
            {
                "maxSkew": 1,
                "topologyKey": "kubernetes.io/hostname",
                "whenUnsatisfiable": "ScheduleAnyway",
            }
        ],
    },
}
SOURCES: list[tuple[tuple[str, ...], dict[str, Any] | None]] = [
    ((), None),
    *[((name,), None) for name in EXAMPLE_NAMES],
    (("production",), KITCHEN_SINK),
]
SOURCE_IDS = ["defaults", *EXAMPLE_NAMES, "kitchen-sink"]


def _major_minor(version: str) -> str:
    return ".".join(version.split(".")[:2])


@pytest.mark.parametrize("kube", KUBES)
@pytest.mark.parametrize(("examples", "overrides"), SOURCES, ids=SOURCE_IDS)
def test_every_object_is_valid_kubernetes(
    examples: tuple[str, ...], overrides: dict[str, Any] | None, kube: str
) -> None:
    manifest = render(overrides, examples=examples, kube_version=kube)
    checked = 0
    for obj in manifest.objects:
        if obj["apiVersion"].startswith(CRD_GROUPS):
            continue
        try:
            validate(obj, _major_minor(kube), strict=True)
        except ValidationError as error:
            pytest.fail(f"{obj['kind']}/{obj['metadata']['name']} on {kube}: {error.message}")
        checked += 1
    assert checked >= 6


@pytest.mark.parametrize("kube", KUBES)
@pytest.mark.parametrize(("examples", "overrides"), SOURCES, ids=SOURCE_IDS)
def test_every_pod_template_passes_restricted(
    examples: tuple[str, ...], overrides: dict[str, Any] | None, kube: str
) -> None:
    manifest = render(overrides, examples=examples, kube_version=kube)
    pods = list(pod_specs(manifest))
    assert pods, "no pod templates rendered"
    for where, pod in pods:
        assert restricted_violations(pod) == [], where


@pytest.mark.parametrize(("examples", "overrides"), SOURCES, ids=SOURCE_IDS)
def test_every_container_is_locked_down_and_bounded(
    examples: tuple[str, ...], overrides: dict[str, Any] | None
) -> None:
    for where, pod in pod_specs(render(overrides, examples=examples)):
        for container in all_containers(pod):
            name = f"{where} {container['name']}"
            context = container["securityContext"]
            assert context["readOnlyRootFilesystem"] is True, name
            assert context["capabilities"]["drop"] == ["ALL"], name
            assert container["resources"]["limits"]["memory"], name


@pytest.mark.parametrize("name", EXAMPLE_NAMES)
def test_helm_lint_strict(name: str) -> None:
    result = run_helm(["lint", "--strict", str(CHART), "-f", str(EXAMPLES / f"{name}.yaml")])
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 chart(s) failed" in result.stdout


def test_helm_lint_strict_defaults() -> None:
    result = run_helm(["lint", "--strict", str(CHART)])
    assert result.returncode == 0, result.stdout + result.stderr


def test_examples_cover_what_each_environment_promises() -> None:
    dev = render(examples=("dev",))
    assert "initContainers" not in dev.agent_pod  # no plugin until you add a reachable repo
    assert dev.has("CronJob") and "file:///backup" in str(dev.backup_cronjob)

    production = render(examples=("production",))
    agent = production.container("agent")
    assert agent["image"] == "registry.example.com/hermes-runtime/agent:0.1.0"
    assert production.has("NetworkPolicy")
    assert agent["resources"]["limits"]["memory"] == "6Gi"
    cron = production.backup_cronjob
    assert "s3://hermes-prod-backups/agents/prod" in str(cron)
    assert "--keep-daily 14" in str(cron)
    assert production.container("vault-render")

    ci = render(examples=("ci",))
    for _, pod in pod_specs(ci):
        for container in all_containers(pod):
            # Pulled from the local registry like any user's, never imported (docs/cluster.md).
            assert container["imagePullPolicy"] == "Always", container["name"]
            assert container["image"].startswith("localhost:5001/hermes-runtime/"), container[
                "image"
            ]


@pytest.mark.parametrize("name", EXAMPLE_NAMES)
def test_examples_keep_secrets_out_of_configmaps(name: str) -> None:
    values = yaml.safe_load((EXAMPLES / f"{name}.yaml").read_text())
    manifest = render(examples=(name,))
    config_text = str([cm["data"] for cm in manifest.all("ConfigMap")])
    api_key = (values.get("apiServer") or {}).get("key")
    if api_key:
        assert api_key not in config_text
    config = yaml.safe_load(manifest.configmap_file("config.yaml"))
    assert config["model"]["api_key"] == "${LLM_API_KEY}"


def _header(name: str) -> str:
    """The comment block at the top of an example."""
    lines = (EXAMPLES / f"{name}.yaml").read_text().splitlines()
    return "\n".join(line for line in itertools.takewhile(lambda ln: ln.startswith("#"), lines))


def _secrets_named(values: dict[str, Any]) -> set[str]:
    """Every existing Secret an example refers to (the ones a user must create first)."""
    backup_s3 = values.get("backup", {}).get("target", {}).get("s3", {})
    names = {
        values.get("llm", {}).get("existingSecret"),
        values.get("apiServer", {}).get("existingSecret"),
        backup_s3.get("existingSecret"),
        values.get("vault", {}).get("caSecret"),
    }
    for plugin in values.get("plugins") or []:
        auth = plugin.get("auth") or {}
        names |= {auth.get("existingSecret"), auth.get("sshKeySecret")}
    return {name for name in names if name}


@pytest.mark.parametrize("name", EXAMPLE_NAMES)
def test_example_says_first_what_it_needs(name: str) -> None:
    """Issue 13: the one-liner failed on a Secret that only a comment deep inside named."""
    header = _header(name)
    assert "Needs first" in header, header
    values = yaml.safe_load((EXAMPLES / f"{name}.yaml").read_text())
    for secret in _secrets_named(values):
        assert f"create secret generic {secret} " in header, (name, secret)


@pytest.mark.parametrize("name", EXAMPLE_NAMES)
def test_example_pins_no_placeholder_digest(name: str) -> None:
    values = yaml.safe_load((EXAMPLES / f"{name}.yaml").read_text())
    for image in (values.get("image", {}), values.get("gitSync", {}).get("image", {})):
        digest = image.get("digest", "")
        assert not digest, f"{name}: a digest nobody here can verify ({digest}) cannot pull"


@pytest.mark.parametrize("name", EXAMPLE_NAMES)
def test_example_renders_no_crd_object_on_a_bare_cluster(name: str) -> None:
    manifest = render(examples=(name,))
    assert not [o["kind"] for o in manifest.objects if o["apiVersion"].startswith(CRD_GROUPS)]


def test_chart_readme_install_creates_what_dev_yaml_needs() -> None:
    """The chart README's install lines, in order, create every Secret before using dev.yaml."""
    readme = (CHART / "README.md").read_text()
    block = readme.split("## Install", 1)[1].split("```bash", 1)[1].split("```", 1)[0]
    install_at = block.index("-f values-examples/dev.yaml")
    values = yaml.safe_load((EXAMPLES / "dev.yaml").read_text())
    for secret in _secrets_named(values):
        created = block.find(f"create secret generic {secret} ")
        assert 0 <= created < install_at, secret


@pytest.mark.parametrize("name", EXAMPLE_NAMES)
def test_two_renders_of_an_example_are_byte_identical(name: str) -> None:
    """What Argo CD compares on each refresh (it renders with `helm template`, no cluster):
    nothing in a render may change by itself, or the app is out of sync forever and each sync
    replaces what changed (tests/e2e/test_gitops.py applies two renders)."""
    first = template({}, examples=(name,))
    second = template({}, examples=(name,))
    assert first.returncode == 0, first.stderr
    assert first.stdout == second.stdout
