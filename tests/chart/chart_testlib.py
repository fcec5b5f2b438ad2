"""Render the hermes-agent chart with the real helm binary and pick objects out of it.

Why a subprocess and not a template engine in Python: the point is to test what
`helm install` will do, including helm's own JSON-schema validation and its Go
template functions, so only the real binary counts.
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import kubernetes_validate.utils
import yaml

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "charts" / "hermes-agent"
EXAMPLES = REPO / "values-examples"
EXAMPLE_NAMES = ("dev", "staging", "production", "ci")
TOOLS_DIR = REPO / ".cache" / "tools"

# Oldest and newest Kubernetes the chart supports (Chart.yaml kubeVersion >= 1.27;
# kubernetes-validate 1.37.0 carries schemas up to 1.37).
OLDEST_KUBE = "1.27.0"
NEWEST_KUBE = "1.37.0"
RELEASE = "hermes"
NAMESPACE = "agents"
FULLNAME = f"{RELEASE}-hermes-agent"

# The API a ServiceMonitor needs; helm template only knows it when told (--api-versions).
SERVICE_MONITOR_API = "monitoring.coreos.com/v1/ServiceMonitor"

POD_KINDS = ("Deployment", "StatefulSet", "DaemonSet", "Job", "CronJob", "Pod")

# kubernetes-validate reads and parses its schema files (a 1.8 MB _definitions.json among
# them) again for every object it checks, 0.4 s a render. They are read-only files of the
# installed package: read each once per run. The validation itself is unchanged.
kubernetes_validate.utils.schema_contents = cache(kubernetes_validate.utils.schema_contents)

# PyYAML's safe loader with libyaml's parser when PyYAML has it: the same documents, a render
# parsed in 0.03 s instead of 0.17 s (the pure-Python parser).
YAML_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


@cache
def helm_binary() -> str:
    """The project's pinned helm (v4, from ci/install-tools.sh, installed on demand).

    Not whatever helm is on PATH: helm 3 words schema errors differently, and the
    schema tests assert on helm 4's wording (the field path).
    """
    pinned = TOOLS_DIR / "bin" / "helm"
    if not pinned.exists():
        subprocess.run([str(REPO / "ci" / "install-tools.sh"), str(TOOLS_DIR)], check=True)
    return str(pinned)


@dataclass(frozen=True)
class HelmResult:
    returncode: int
    stdout: str
    stderr: str


def run_helm(args: Sequence[str]) -> HelmResult:
    env = {**os.environ, "HELM_CACHE_HOME": str(TOOLS_DIR / "helm-cache")}
    done = subprocess.run(
        [helm_binary(), *args], capture_output=True, text=True, env=env, timeout=120
    )
    return HelmResult(done.returncode, done.stdout, done.stderr)


def template(
    overrides: Mapping[str, Any] | None = None,
    *,
    examples: Sequence[str] = (),
    kube_version: str = NEWEST_KUBE,
    api_versions: Sequence[str] = (),
    release: str = RELEASE,
    namespace: str = NAMESPACE,
) -> HelmResult:
    args = ["template", release, str(CHART), "--namespace", namespace]
    args += ["--kube-version", kube_version]
    for api in api_versions:
        args += ["--api-versions", api]
    for name in examples:
        args += ["-f", str(EXAMPLES / f"{name}.yaml")]
    with tempfile.TemporaryDirectory(prefix="chart-values-") as scratch:
        if overrides:
            path = Path(scratch) / "overrides.yaml"
            # JSON is YAML: no --set escaping rules to get wrong.
            path.write_text(json.dumps(overrides), encoding="utf-8")
            args += ["-f", str(path)]
        return run_helm(args)


@cache
def _render_cached(
    key: str,
    examples: tuple[str, ...],
    kube_version: str,
    api_versions: tuple[str, ...] = (),
    release: str = RELEASE,
    namespace: str = NAMESPACE,
) -> tuple[dict, ...]:
    overrides = json.loads(key)
    result = template(
        overrides,
        examples=examples,
        kube_version=kube_version,
        api_versions=api_versions,
        release=release,
        namespace=namespace,
    )
    if result.returncode != 0:
        raise AssertionError(f"helm template failed:\n{result.stderr}")
    return tuple(doc for doc in yaml.load_all(result.stdout, Loader=YAML_LOADER) if doc)


class Manifest:
    """The objects of one render, with lookups by kind and name."""

    def __init__(self, objects: Sequence[dict]) -> None:
        self.objects = list(objects)

    def all(self, kind: str) -> list[dict]:
        return [obj for obj in self.objects if obj["kind"] == kind]

    def one(self, kind: str, name: str | None = None) -> dict:
        matches = [obj for obj in self.all(kind) if name is None or obj["metadata"]["name"] == name]
        assert len(matches) == 1, f"expected one {kind} {name or ''}, got {len(matches)}"
        return matches[0]

    def has(self, kind: str) -> bool:
        return bool(self.all(kind))

    @property
    def deployment(self) -> dict:
        return self.one("Deployment")

    @property
    def backup_cronjob(self) -> dict:
        """The scheduled backup's CronJob (the weekly verify has one of its own)."""
        return self.one("CronJob", f"{FULLNAME}-backup")

    @property
    def agent_pod(self) -> dict:
        return self.deployment["spec"]["template"]["spec"]

    def container(self, name: str, pod: dict | None = None) -> dict:
        pod = pod if pod is not None else self.agent_pod
        found = [c for c in all_containers(pod) if c["name"] == name]
        assert len(found) == 1, f"container {name!r} not found once in {container_names(pod)}"
        return found[0]

    def configmap_file(self, key: str) -> str:
        return self.one("ConfigMap")["data"][key]


def render(
    overrides: Mapping[str, Any] | None = None,
    *,
    examples: Sequence[str] = (),
    kube_version: str = NEWEST_KUBE,
    api_versions: Sequence[str] = (),
    release: str = RELEASE,
    namespace: str = NAMESPACE,
) -> Manifest:
    """One render's objects (cached per arguments), as release `release` in `namespace`."""
    key = json.dumps(overrides or {}, sort_keys=True)
    cached = _render_cached(
        key, tuple(examples), kube_version, tuple(api_versions), release, namespace
    )
    return Manifest(cached)


def render_error(
    overrides: Mapping[str, Any] | None = None,
    *,
    kube_version: str = NEWEST_KUBE,
    examples: Sequence[str] = (),
    api_versions: Sequence[str] = (),
) -> str:
    """Render values that must be refused; return helm's error text."""
    result = template(
        overrides, examples=examples, kube_version=kube_version, api_versions=api_versions
    )
    assert result.returncode != 0, f"helm accepted values it must refuse: {overrides}"
    return result.stderr


def pod_spec(obj: dict) -> dict | None:
    """The pod spec inside a workload object, whatever its kind."""
    kind = obj["kind"]
    if kind == "Pod":
        return obj["spec"]
    if kind == "CronJob":
        return obj["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    if kind in POD_KINDS:
        return obj["spec"]["template"]["spec"]
    return None


def pod_specs(manifest: Manifest) -> Iterator[tuple[str, dict]]:
    for obj in manifest.objects:
        spec = pod_spec(obj)
        if spec is not None:
            yield f"{obj['kind']}/{obj['metadata']['name']}", spec


def all_containers(pod: dict) -> list[dict]:
    return [
        *pod.get("initContainers", []),
        *pod.get("containers", []),
        *pod.get("ephemeralContainers", []),
    ]


def container_names(pod: dict) -> list[str]:
    return [c["name"] for c in all_containers(pod)]


def env_map(container: dict) -> dict[str, Any]:
    """name -> value, or name -> valueFrom for references."""
    return {
        item["name"]: item.get("value", item.get("valueFrom")) for item in container.get("env", [])
    }
