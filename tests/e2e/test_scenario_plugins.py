"""Scenario 2 (plugins from Git) and the plugin part of scenario 5 (helm upgrade).

An in-cluster Git server (tests/e2e/charts/ci-backends) holds the plugin repositories;
the chart runs one git-sync v4 container per plugin next to the agent in a namespace that
enforces Pod Security "restricted". Checked from inside the agent, as an operator would:

- each /opt/data/plugins/<name> links the checked worktree .git-sync/<name>/.worktrees/<sha>
  (through subPath for one), never git-sync's moving `current`; Hermes ran each plugin's
  register() exactly once and offers its tool;
- a commit pushed to one repository becomes the running code (the time is printed) while a
  conversation is in flight, and that conversation finishes;
- escapes are refused: `..` in subPath by helm (naming the field), an absolute symlink and
  a symlink out of the worktree by the bootstrapper (a log line naming the plugin); the
  other plugin keeps working and the agent stays Ready with no container restart;
- `helm upgrade` that adds one plugin and removes another removes only that link.

git-sync image: upstream registry.k8s.io/git-sync/git-sync where the cluster can pull it,
else the stand-in localhost:5001/hermes-runtime/git-sync:dev (ci/images/git-sync); the suite
prints which.
E2E_GIT_SYNC=upstream|standin forces one.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import textwrap
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from kubernetes.client.rest import ApiException
from support.announce import announce

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
from .test_scenario_lifecycle import upgrade

IMAGES = ["agent", "fake-llm", "git-server"]
STANDIN_IMAGE = images.ref("git-sync")
UPSTREAM = {"registry": "registry.k8s.io", "repository": "git-sync/git-sync", "tag": "v4.7.0"}
GIT_SERVER = "http://git-server:8080"
LOADS = "/opt/data/plugin-loads.log"
SYNC_PERIOD = "1s"
RELOAD_TIMEOUT = 180.0


def plugin_files(name: str, version: str) -> dict[str, str]:
    """A Hermes plugin whose register() logs one line per load and registers `<name>_version`."""
    init = textwrap.dedent(
        f"""
        import os

        NAME = {name!r}
        VERSION = {version!r}


        def _version(args, **kwargs):
            return f"{{NAME}}-version={{VERSION}} pid={{os.getpid()}}"


        def register(ctx):
            with open(os.path.join(os.environ["HERMES_HOME"], "plugin-loads.log"), "a") as fh:
                fh.write(f"{{NAME}} {{VERSION}} {{os.getpid()}}\\n")
            ctx.register_tool(
                name=NAME + "_version",
                toolset=NAME,
                schema={{
                    "name": NAME + "_version",
                    "description": "Report which version of the " + NAME + " plugin runs.",
                    "parameters": {{"type": "object", "properties": {{}}}},
                }},
                handler=_version,
                description="plugin version",
            )
        """
    )
    manifest = f"name: {name}\nversion: {version!r}\ndescription: e2e plugin {name}\n"
    return {"plugin.yaml": manifest, "__init__.py": init}


# name -> subPath inside its repository; every one is seeded by the backends chart.
REPOS = {"weather": "", "tools": "plugins/tools", "notes": ""}


def plugin_value(name: str) -> dict[str, Any]:
    value: dict[str, Any] = {"name": name, "repo": f"{GIT_SERVER}/{name}.git", "ref": "main"}
    if REPOS[name]:
        value["subPath"] = REPOS[name]
    return value


def backends_values(tmp_path: Path) -> Path:
    plugins = {
        name: {"subPath": sub, "files": plugin_files(name, "1")} for name, sub in REPOS.items()
    }
    path = tmp_path / "backends.json"
    path.write_text(json.dumps({"plugins": plugins}))
    return path


# ---------------------------------------------------------------------------------------
# Which git-sync image


def _pull_outcome(cluster: kube.Cluster, namespace: str, image: str) -> str:
    """'pulled', or the kubelet's reason the image could not be had."""
    pod = kube.restricted_pod(kube.unique_name("git-sync-probe"), image, [], user=65533)
    container = pod.spec.containers[0]
    container.image_pull_policy = "IfNotPresent"
    container.command = None  # the image's own entrypoint (/git-sync)
    container.args = ["--version"]
    cluster.core.create_namespaced_pod(namespace, pod)
    outcome: list[str] = []

    def settled() -> bool:
        status = cluster.core.read_namespaced_pod(pod.metadata.name, namespace).status
        for state in [s.state for s in status.container_statuses or []]:
            if state.waiting and state.waiting.reason in (
                "ErrImagePull",
                "ImagePullBackOff",
                "ErrImageNeverPull",
                "InvalidImageName",
            ):
                outcome.append(state.waiting.reason)
                return True
            if state.running or state.terminated:
                outcome.append("pulled")
                return True
        return False

    try:
        kube.wait_until(settled, 120, f"the kubelet to pull or refuse {image}")
    except AssertionError:
        outcome.append("no answer from the registry within 120 s")
    finally:
        cluster.core.delete_namespaced_pod(pod.metadata.name, namespace, grace_period_seconds=0)
    return outcome[0]


def choose_git_sync_image(
    cluster: kube.Cluster, choice: str = "auto"
) -> tuple[dict[str, Any], str]:
    """gitSync.image values and a line saying which: upstream where pullable, else the stand-in."""
    upstream = f"{UPSTREAM['registry']}/{UPSTREAM['repository']}:{UPSTREAM['tag']}"
    outcome = "not tried"
    if choice in ("auto", "upstream"):
        namespace = kube.create_restricted_namespace(cluster, "e2e-git-sync-probe")
        try:
            outcome = _pull_outcome(cluster, namespace, upstream)
        finally:
            kube.delete_namespace(cluster, namespace)
    if outcome == "pulled" or choice == "upstream":
        values = {**UPSTREAM, "digest": "", "pullPolicy": "IfNotPresent"}
        return values, f"e2e git-sync image: upstream {upstream} ({outcome})"
    images.require(["git-sync"])
    values = {
        "registry": images.REGISTRY,
        "repository": images.repository("git-sync"),
        "tag": images.tag_of("git-sync"),
        "digest": "",
        "pullPolicy": images.PULL_POLICY,
    }
    return values, f"e2e git-sync image: stand-in {STANDIN_IMAGE} (upstream {upstream}: {outcome})"


@pytest.fixture(scope="module")
def git_sync_choice(cluster: kube.Cluster) -> tuple[dict[str, Any], str]:
    """gitSync.image values for every install of this module, and the line saying which."""
    return choose_git_sync_image(cluster, os.environ.get("E2E_GIT_SYNC", "auto"))


@pytest.fixture
def git_sync_image(
    git_sync_choice: tuple[dict[str, Any], str], request: pytest.FixtureRequest
) -> dict[str, Any]:
    """The module's gitSync.image values (which image: announced on the terminal)."""
    values, line = git_sync_choice
    announce(request.node, line)
    return values


def agent_values(
    image: dict[str, Any], names: list[str], period: str = SYNC_PERIOD
) -> dict[str, Any]:
    return {
        "plugins": [plugin_value(name) for name in names],
        "gitSync": {"image": image, "period": period},
    }


# ---------------------------------------------------------------------------------------
# Reading the agent


def loads(
    cluster: kube.Cluster, namespace: str, *, written: bool = False
) -> list[tuple[str, str, int]]:
    """(plugin, version, pid) for every register() call, oldest first.

    `written`: the log is known to hold rows (it is only ever appended to), so an empty
    one fails here, showing the file as `ls` sees it.
    """
    script = f"test ! -e {LOADS} || cat {LOADS}"
    out = agent_exec(cluster, namespace, ["sh", "-c", script], repeatable=True)
    if written and not out.strip():
        listing = agent_exec(cluster, namespace, ["sh", "-c", f"ls -la {LOADS} 2>&1 || true"])
        raise AssertionError(f"the plugin load log reads empty: {listing.strip()}")
    rows = []
    for line in out.splitlines():
        name, version, pid = line.split()
        rows.append((name, version, int(pid)))
    return rows


def gateway_loads(cluster: kube.Cluster, namespace: str) -> dict[str, list[str]]:
    """plugin -> versions registered by the newest gateway process (the last pid logged)."""
    rows = loads(cluster, namespace, written=True)
    pid = rows[-1][2]
    by_name: dict[str, list[str]] = {}
    for name, version, row_pid in rows:
        if row_pid == pid:
            by_name.setdefault(name, []).append(version)
    return by_name


def readlink(cluster: kube.Cluster, namespace: str, path: str) -> str:
    return agent_exec(cluster, namespace, ["readlink", path], repeatable=True).strip()


def tool_versions(cluster: kube.Cluster, namespace: str, names: list[str]) -> dict[str, str]:
    """Ask the fake LLM to call each plugin's tool; the reply carries each tool's output."""
    directives = " ".join(f"[[tool:{name}_version {{}}]]" for name in names)
    (reply,) = chat(cluster, namespace, kube.unique_name("tools"), [f"Versions? {directives}"])
    assert reply.startswith("Tool results:"), f"the tools were not offered or not run: {reply}"
    found: dict[str, str] = {}
    for name in names:
        match = re.search(rf"\b{name}-version=(\S+)", reply)
        assert match, f"{name}_version did not answer: {reply}"
        found[name] = match.group(1)
    return found


def agent_container_restarts(cluster: kube.Cluster, namespace: str) -> int:
    pod = cluster.core.read_namespaced_pod(agent_pod(cluster, namespace), namespace)
    (status,) = [s for s in pod.status.container_statuses if s.name == "agent"]
    return int(status.restart_count)


def agent_ready(cluster: kube.Cluster, namespace: str) -> bool:
    pod = cluster.core.read_namespaced_pod(agent_pod(cluster, namespace), namespace)
    return any(c.type == "Ready" and c.status == "True" for c in pod.status.conditions or [])


def agent_log(cluster: kube.Cluster, namespace: str) -> str:
    return kube.pod_log(cluster, namespace, agent_pod(cluster, namespace), "agent")


FAKE_LLM_CALL = """
import json, sys, urllib.request
spec = json.load(sys.stdin)
data = None if spec["body"] is None else json.dumps(spec["body"]).encode()
request = urllib.request.Request(
    spec["url"], data=data, headers={"Content-Type": "application/json"}
)
answer = json.loads(urllib.request.urlopen(request, timeout=30).read())
print(json.dumps(len(answer) if spec["count"] else answer))
"""


def fake_llm(
    cluster: kube.Cluster, namespace: str, path: str, body: Any = None, count: bool = False
) -> Any:
    """GET/POST the fake LLM's control endpoints from inside the agent (cluster DNS).

    count=True returns the length of the answer (the recorded requests are large)."""
    spec = {"url": f"http://fake-llm:8080{path}", "body": body, "count": count}
    out = agent_exec(cluster, namespace, ["python3", "-c", FAKE_LLM_CALL], json.dumps(spec))
    return json.loads(out)


def wait_for_version(
    cluster: kube.Cluster, namespace: str, name: str, version: str, since: float
) -> float:
    """Seconds from `since` until `name` at `version` registered in a gateway."""

    def loaded() -> bool:
        return (name, version) in {(n, v) for n, v, _ in loads(cluster, namespace)}

    kube.wait_until(loaded, RELOAD_TIMEOUT, f"{name} v{version} running", interval=0.5)
    return time.monotonic() - since


def install(
    helm: kube.Helm,
    tmp_path: Path,
    image: dict[str, Any],
    names: list[str],
    label: str,
    period: str = SYNC_PERIOD,
) -> None:
    """The backends (Git server seeded with every plugin of REPOS, fake LLM), then the agent."""
    helm.install("backends", BACKENDS_CHART, values=[backends_values(tmp_path)], timeout="3m")
    values = tmp_path / f"{label}.json"
    values.write_text(json.dumps(agent_values(image, names, period)))
    helm.install(RELEASE, CHART, values=[CI_VALUES, values], timeout="8m")


def helm_refuses(helm: kube.Helm, *args: str) -> str:
    cmd = [helm.binary, "--kubeconfig", str(helm.kubeconfig), "--namespace", helm.namespace]
    done = subprocess.run([*cmd, *args], capture_output=True, text=True, timeout=300)
    assert done.returncode != 0, f"helm accepted what it must refuse: {args}\n{done.stdout}"
    return done.stderr


# ---------------------------------------------------------------------------------------
# Scenario 2


@pytest.mark.timeout(1500)
def test_plugins_from_git_load_once_reload_on_push_and_refuse_escapes(
    cluster: kube.Cluster,
    namespace: str,
    helm: kube.Helm,
    tmp_path: Path,
    git_sync_image: dict[str, Any],
    request: pytest.FixtureRequest,
) -> None:
    images.require(IMAGES)
    install(helm, tmp_path, git_sync_image, ["weather", "tools"], "scenario2")

    with git_remote(cluster, namespace, REPOS) as remote:
        # Links name the checked worktree (subPath for tools), never git-sync's `current`.
        for name, below in (("weather", ""), ("tools", "/plugins/tools")):
            head = remote.head(name)
            assert readlink(cluster, namespace, f"/opt/data/plugins/{name}") == (
                f"../.git-sync/{name}/.worktrees/{head}{below}"
            )
            current = readlink(cluster, namespace, f"/opt/data/.git-sync/{name}/current")
            assert current == f".worktrees/{remote.head(name)}", current

        # Each plugin's tool answers, and each registered exactly once in the gateway.
        assert tool_versions(cluster, namespace, ["weather", "tools"]) == {
            "weather": "1",
            "tools": "1",
        }
        assert gateway_loads(cluster, namespace) == {"weather": ["1"], "tools": ["1"]}

        # A push while a conversation is in flight: the turn finishes, then the new code runs.
        fake_llm(cluster, namespace, "/_reset", {})  # at most 200 requests are recorded
        fake_llm(cluster, namespace, "/_control", {"mode": "hang", "hang_seconds": 15})
        before = fake_llm(cluster, namespace, "/_requests", count=True)
        replies: list[list[str]] = []
        errors: list[BaseException] = []

        def converse() -> None:
            try:
                replies.append(chat(cluster, namespace, "e2e-inflight", ["A slow question."]))
            except BaseException as exc:  # reported below, in the test's thread
                errors.append(exc)

        talker = threading.Thread(target=converse)
        talker.start()
        kube.wait_until(
            lambda: fake_llm(cluster, namespace, "/_requests", count=True) > before,
            120,
            "the in-flight turn to reach the LLM",
        )
        fake_llm(cluster, namespace, "/_control", {"mode": "normal"})  # only that turn hangs
        pushed = time.monotonic()
        remote.push("weather", plugin_files("weather", "2"))
        seconds = wait_for_version(cluster, namespace, "weather", "2", pushed)
        announce(
            request.node, f"push -> weather v2 running: {seconds:.1f} s (a turn was in flight)"
        )
        talker.join(timeout=300)
        assert not errors, f"the in-flight conversation failed: {errors[0]!r}"
        assert replies == [["Echo: A slow question."]]
        assert gateway_loads(cluster, namespace) == {"weather": ["2"], "tools": ["1"]}
        assert tool_versions(cluster, namespace, ["weather", "tools"]) == {
            "weather": "2",
            "tools": "1",
        }

        # Escapes. `..` in subPath: helm refuses it, naming the field; nothing changes.
        bad = agent_values(git_sync_image, ["weather", "tools"])
        bad["plugins"][1]["subPath"] = "plugins/../../outside"
        bad_values = tmp_path / "escape.json"
        bad_values.write_text(json.dumps(bad))
        error = helm_refuses(
            helm, "upgrade", RELEASE, str(CHART), "-f", str(CI_VALUES), "-f", str(bad_values)
        )
        assert "subPath" in error, error
        # An absolute symlink, then a relative one out of the worktree: the bootstrapper
        # refuses the tools commit with a log line; the running code stays, no restart.
        pid_before = loads(cluster, namespace, written=True)[-1][2]
        escapes = [{"passwd": "/etc/passwd"}, {"up": "../../../../../../../etc"}]
        for index, links in enumerate(escapes, start=1):
            sha = remote.push("tools", plugin_files("tools", f"escape{index}"), links)
            kube.wait_until(
                lambda sha=sha: readlink(
                    cluster, namespace, "/opt/data/.git-sync/tools/current"
                ).endswith(sha),
                120,
                f"git-sync to sync escape commit {index}",
            )
            (link_name,) = links
            kube.wait_until(
                lambda link_name=link_name: any(
                    '"plugins.watch.plugin_failed"' in line
                    and '"tools"' in line
                    and link_name in line
                    and "outside" in line
                    for line in agent_log(cluster, namespace).splitlines()
                ),
                60,
                f"the bootstrapper to refuse escape commit {index} ({links})",
            )
            pid_now = loads(cluster, namespace, written=True)[-1][2]
            assert pid_now == pid_before, "the gateway was restarted"
            assert tool_versions(cluster, namespace, ["weather", "tools"]) == {
                "weather": "2",
                "tools": "1",
            }
            assert agent_ready(cluster, namespace), "the agent is not Ready after an escape"
            # `current` already points at the refused commit: its link is gone, so no later
            # gateway start can load it.
            probe = "import os; print(os.path.lexists('/opt/data/plugins/tools'))"
            linked = agent_exec(cluster, namespace, ["python3", "-c", probe]).strip()
            assert linked == "False", "the refused commit still sits behind plugins/tools"
        assert agent_container_restarts(cluster, namespace) == 0


# ---------------------------------------------------------------------------------------
# Scenario 5, plugin part


def entry_identity(cluster: kube.Cluster, namespace: str, path: str) -> str:
    """inode, mtime and link text of a directory entry (stat does not follow the link)."""
    return agent_exec(cluster, namespace, ["stat", "-c", "%i %Y %N", path], repeatable=True).strip()


@pytest.mark.timeout(1200)
def test_upgrade_adds_one_plugin_and_removes_only_the_removed_link(
    cluster: kube.Cluster,
    namespace: str,
    helm: kube.Helm,
    tmp_path: Path,
    git_sync_image: dict[str, Any],
) -> None:
    images.require(IMAGES)
    install(helm, tmp_path, git_sync_image, ["weather", "tools"], "v1")
    # The user's own plugin folder, next to ours: never touched by the bootstrapper.
    agent_exec(cluster, namespace, ["mkdir", "-p", "/opt/data/plugins/my-own"])
    kept = {
        path: entry_identity(cluster, namespace, path)
        for path in ("/opt/data/plugins/tools", "/opt/data/plugins/my-own")
    }
    old_pod = agent_pod(cluster, namespace)
    # PIDs restart in the new pod: start the load log afresh so one pid means one process.
    agent_exec(cluster, namespace, ["sh", "-c", f": > {LOADS}"])

    upgrade(helm, tmp_path, agent_values(git_sync_image, ["tools", "notes"]))
    kube.wait_until(
        lambda: _only_pod_is_new(cluster, namespace, old_pod), 300, "the upgraded agent pod"
    )

    entries = agent_exec(
        cluster, namespace, ["ls", "-1", "/opt/data/plugins"], repeatable=True
    ).split()
    assert sorted(entries) == ["my-own", "notes", "tools"], entries
    notes = readlink(cluster, namespace, "/opt/data/.git-sync/notes/current")
    assert readlink(cluster, namespace, "/opt/data/plugins/notes") == f"../.git-sync/notes/{notes}"
    for path, identity in kept.items():
        assert entry_identity(cluster, namespace, path) == identity, f"{path} was touched"
    assert tool_versions(cluster, namespace, ["tools", "notes"]) == {"tools": "1", "notes": "1"}
    assert gateway_loads(cluster, namespace) == {"tools": ["1"], "notes": ["1"]}
    enabled = agent_exec(
        cluster,
        namespace,
        [
            "python3",
            "-c",
            "import yaml; c = yaml.safe_load(open('/opt/data/config.yaml'));"
            " print(' '.join(sorted((c.get('plugins') or {}).get('enabled') or [])))",
        ],
    ).split()
    assert "weather" not in enabled and {"tools", "notes"} <= set(enabled), enabled


def _only_pod_is_new(cluster: kube.Cluster, namespace: str, old_pod: str) -> bool:
    try:
        return agent_pod(cluster, namespace) != old_pod
    except (AssertionError, ApiException):
        return False
