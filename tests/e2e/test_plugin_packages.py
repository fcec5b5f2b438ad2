"""Plugins that bring Python packages (pluginPackages, docs/plugins.md "Plugins with dependencies").

An in-cluster package index (pypiserver, ci/images/package-index.Dockerfile, installed by
tests/e2e/charts/ci-backends) serves wheels built here, published as twine would; the Git
server holds the plugins, each with a hash-pinned requirements.txt. The chart's plugin-deps
sidecar installs them, the agent links a plugin once its packages are in place, and the
gateway imports them from the data volume. Checked as an operator would, through the fake
LLM calling each plugin's tool:

- a plugin that imports the package it declared answers its tool call;
- a push that adds a package takes effect with no new image and no pod restart (the time from
  the push to the working tool is printed);
- a requirement without a hash, a package the index does not have and a wheel for another
  platform are each refused by the installer, naming the plugin and the package; those
  plugins stay unlinked and the agent keeps serving.
"""

from __future__ import annotations

import functools
import hashlib
import json
import re
import textwrap
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from support.announce import announce
from support.wheels import build_wheel, pinned

from . import images, kube
from .gitremote_testlib import git_remote
from .test_scenario_conversation import (
    BACKENDS_CHART,
    CHART,
    CI_VALUES,
    RELEASE,
    agent_exec,
    agent_pod,
    chat,
)

IMAGES = ["agent", "fake-llm", "git-server", "git-sync", "package-index"]
INDEX_URL = "http://package-index:8080/simple/"
GOOD = "geo"
# Plugins whose requirements are refused: no hash, a package not on the index, another platform.
BAD = ("nohash", "absent", "winonly")
PUSH_TIMEOUT = 240.0


# ---------------------------------------------------------------------------------------
# Wheels and requirements


def version_wheel(out_dir: Path, name: str, version: str, tag: str = "py3-none-any") -> Path:
    """A wheel of module ``name`` whose VALUE is '<name>-<version>'."""
    return build_wheel(
        out_dir, name, version, {f"{name}/__init__.py": f"VALUE = '{name}-{version}'\n"}, tag
    )


def plugin_files(name: str, modules: list[str], requirements: str) -> dict[str, str]:
    """A Hermes plugin whose tool `<name>_answer` reports the VALUE of each module it imports."""
    imports = "".join(f"import {module}\n" for module in modules)
    values = " + '+' + ".join(f"{module}.VALUE" for module in modules) or "'none'"
    init = imports + textwrap.dedent(
        f"""
        NAME = {name!r}


        def _answer(args, **kwargs):
            return NAME + "-answer=" + ({values})


        def register(ctx):
            ctx.register_tool(
                name=NAME + "_answer",
                toolset=NAME,
                schema={{
                    "name": NAME + "_answer",
                    "description": "Report the packages the " + NAME + " plugin imports.",
                    "parameters": {{"type": "object", "properties": {{}}}},
                }},
                handler=_answer,
                description="plugin packages",
            )
        """
    )
    manifest = f"name: {name}\nversion: '1'\ndescription: e2e plugin {name}\n"
    return {"plugin.yaml": manifest, "__init__.py": init, "requirements.txt": requirements}


# ---------------------------------------------------------------------------------------
# The in-cluster index


def publish(cluster: kube.Cluster, namespace: str, wheels: list[Path]) -> None:
    """Upload each wheel to the index (POST /, twine's protocol; the index takes no credentials)."""
    with kube.port_forward(cluster, namespace, "svc/package-index", 8080) as port:
        for wheel in wheels:
            response = httpx.post(
                f"http://127.0.0.1:{port}/",
                data={":action": "file_upload"},
                files={"content": (wheel.name, wheel.read_bytes())},
                timeout=30,
            )
            assert response.status_code == 200, (wheel.name, response.status_code, response.text)


# ---------------------------------------------------------------------------------------
# Reading the agent


def answer(cluster: kube.Cluster, namespace: str, name: str) -> str | None:
    """What the plugin's tool returns when the fake LLM calls it; None when it did not run."""
    session = kube.unique_name("packages")
    (reply,) = chat(cluster, namespace, session, [f"Packages? [[tool:{name}_answer {{}}]]"])
    match = re.search(rf"\b{name}-answer=(\S+)", reply)
    return match.group(1).rstrip(".,;\"'") if match else None


def linked(cluster: kube.Cluster, namespace: str, name: str) -> bool:
    probe = f"import os; print(os.path.lexists('/opt/data/plugins/{name}'))"
    out = agent_exec(cluster, namespace, ["python3", "-c", probe], repeatable=True)
    return out.strip() == "True"


def sidecar_log(cluster: kube.Cluster, namespace: str) -> str:
    return kube.pod_log(cluster, namespace, agent_pod(cluster, namespace), "plugin-deps")


def install_state(cluster: kube.Cluster, namespace: str, name: str) -> dict[str, Any]:
    """The plugin's state.json as the agent reads it (empty before the first install)."""
    path = f"/opt/data/.plugin-packages/{name}/state.json"
    out = agent_exec(
        cluster, namespace, ["sh", "-c", f"cat {path} 2>/dev/null || echo {{}}"], repeatable=True
    )
    return dict(json.loads(out))


def refused(cluster: kube.Cluster, namespace: str, name: str, reason: str) -> bool:
    """plugin-deps logged `error: plugin NAME: ...REASON...` (each failure once, on stderr)."""
    lines = sidecar_log(cluster, namespace).splitlines()
    return any(f"error: plugin {name}:" in line and reason in line for line in lines)


def restarts(cluster: kube.Cluster, namespace: str) -> dict[str, int]:
    pod = cluster.core.read_namespaced_pod(agent_pod(cluster, namespace), namespace)
    statuses = [*(pod.status.init_container_statuses or []), *pod.status.container_statuses]
    return {s.name: int(s.restart_count) for s in statuses}


def agent_ready(cluster: kube.Cluster, namespace: str) -> bool:
    pod = cluster.core.read_namespaced_pod(agent_pod(cluster, namespace), namespace)
    return any(c.type == "Ready" and c.status == "True" for c in pod.status.conditions or [])


# ---------------------------------------------------------------------------------------
# The scenario


def install(
    cluster: kube.Cluster,
    namespace: str,
    helm: kube.Helm,
    tmp_path: Path,
    repos: dict[str, dict[str, str]],
    wheels: list[Path],
) -> None:
    """Backends (Git server seeded with `repos`, fake LLM, package index), the wheels published,
    then the agent with every plugin and pluginPackages on."""
    backends: dict[str, Any] = {
        "plugins": {name: {"subPath": "", "files": files} for name, files in repos.items()},
        "fakeLlm": {"image": images.ref("fake-llm")},
        "gitServer": {"image": images.ref("git-server")},
        "packageIndex": {"enabled": True, "image": images.ref("package-index")},
    }
    backends_file = tmp_path / "backends.json"
    backends_file.write_text(json.dumps(backends))
    helm.install("backends", BACKENDS_CHART, values=[backends_file], timeout="3m")
    publish(cluster, namespace, wheels)
    values = {
        "plugins": [
            {"name": name, "repo": f"http://git-server:8080/{name}.git", "ref": "main"}
            for name in repos
        ],
        "gitSync": {"period": "1s"},
        "pluginPackages": {"enabled": True, "indexUrl": INDEX_URL, "interval": 2},
    }
    values_file = tmp_path / "agent.json"
    values_file.write_text(json.dumps(values))
    helm.install(RELEASE, CHART, values=[CI_VALUES, values_file], timeout="8m")


@pytest.mark.timeout(1500)
def test_plugin_packages_install_reload_on_push_and_refuse_bad_requirements(
    cluster: kube.Cluster,
    namespace: str,
    helm: kube.Helm,
    tmp_path: Path,
    request: pytest.FixtureRequest,
) -> None:
    images.require(IMAGES)
    geodep = version_wheel(tmp_path, "geodep", "1.0")
    extradep = version_wheel(tmp_path, "extradep", "2.0")
    winonly = version_wheel(tmp_path, "winonly", "1.0", tag="py3-none-win_amd64")
    unpublished = tmp_path / "unpublished"
    unpublished.mkdir()
    absent = version_wheel(unpublished, "absentdep", "1.0")  # never on the index
    repos = {
        GOOD: plugin_files(GOOD, ["geodep"], pinned(geodep)),
        "nohash": plugin_files("nohash", ["geodep"], "geodep==1.0\n"),
        "absent": plugin_files("absent", ["absentdep"], pinned(absent)),
        "winonly": plugin_files("winonly", ["winonly"], pinned(winonly)),
    }
    install(cluster, namespace, helm, tmp_path, repos, [geodep, extradep, winonly])

    # The plugin that imports its declared package answers through the gateway.
    kube.wait_until(lambda: linked(cluster, namespace, GOOD), 180, f"{GOOD} linked")
    assert answer(cluster, namespace, GOOD) == "geodep-1.0"

    # Each bad requirements file is refused naming the plugin and the package; unlinked.
    reasons = {
        "nohash": "geodep has no --hash",
        "absent": "package absentdep: not on the index",
        "winonly": "package winonly: no wheel for this platform",
    }
    for name, reason in reasons.items():
        kube.wait_until(
            functools.partial(refused, cluster, namespace, name, reason),
            180,
            f"plugin-deps to refuse {name} ({reason})",
        )
        assert not linked(cluster, namespace, name), f"{name} was linked"
        assert answer(cluster, namespace, name) is None, f"{name}'s tool answered"
    assert agent_ready(cluster, namespace), "the agent is not Ready beside refused plugins"
    # The agent cannot change an installed package: its view of them is read-only.
    probe = "import os; print(os.access('/opt/data/.plugin-packages/geo', os.W_OK))"
    writable = agent_exec(cluster, namespace, ["python3", "-c", probe]).strip()
    assert writable == "False", "the agent can write the installed packages"

    # A push that adds a package: working with no new image and no pod restart.
    before = restarts(cluster, namespace)
    files = plugin_files(GOOD, ["geodep", "extradep"], pinned(geodep) + pinned(extradep))
    digest = hashlib.sha256(files["requirements.txt"].encode()).hexdigest()
    started = time.monotonic()
    with git_remote(cluster, namespace) as remote:
        remote.push(GOOD, files)
    kube.wait_until(
        lambda: install_state(cluster, namespace, GOOD).get("requirements_sha256") == digest,
        PUSH_TIMEOUT,
        f"plugin-deps to install {GOOD}'s new requirements",
        interval=0.5,
    )
    installed = time.monotonic() - started
    kube.wait_until(
        lambda: answer(cluster, namespace, GOOD) == "geodep-1.0+extradep-2.0",
        PUSH_TIMEOUT,
        f"{GOOD} answering with extradep after the push",
        interval=0.5,
    )
    seconds = time.monotonic() - started
    line = (
        f"push adding a package -> {GOOD} tool working: {seconds:.1f} s"
        f" (installed after {installed:.1f} s)"
    )
    announce(request.node, line)
    print(f"plugin packages: {line}")
    assert install_state(cluster, namespace, GOOD)["status"] == "installed"
    # Installed as plugin-deps' own UID, not the agent's.
    owner = agent_exec(
        cluster, namespace, ["stat", "-c", "%u", f"/opt/data/.plugin-packages/{GOOD}/{digest}"]
    )
    assert owner.strip() == "10005", owner
    assert restarts(cluster, namespace) == before, "a container restarted"
    assert agent_ready(cluster, namespace)
    for name in BAD:
        assert not linked(cluster, namespace, name), f"{name} was linked after the push"
