"""git-sync per plugin: v4 flags, native or legacy sidecars, auth, and the plugin spec file."""

from __future__ import annotations

import re

import pytest
import yaml
from chart_testlib import (
    NEWEST_KUBE,
    all_containers,
    container_names,
    env_map,
    render,
    render_error,
)

WEATHER = {"name": "weather", "repo": "https://git.example.com/weather.git", "ref": "v1"}
TICKETS = {
    "name": "tickets",
    "repo": "git@git.example.com:t/tickets.git",
    "subPath": "plugin",
    "period": "10s",
    "depth": 0,
    "enabled": False,
    "auth": {"sshKeySecret": "git-ssh", "knownHosts": "git.example.com ssh-ed25519 AAAA"},
}
PLUGINS = {"plugins": [WEATHER, TICKETS]}


def test_one_native_git_sync_sidecar_per_plugin_before_the_agent() -> None:
    manifest = render(PLUGINS, kube_version=NEWEST_KUBE)
    init = manifest.agent_pod["initContainers"]
    assert [c["name"] for c in init] == ["git-sync-weather", "git-sync-tickets"]
    for index, container in enumerate(init):
        assert container["restartPolicy"] == "Always"
        port = 8081 + index
        assert container["startupProbe"]["httpGet"] == {"path": "/", "port": port}
        assert env_map(container)["GITSYNC_HTTP_BIND"] == f":{port}"
    assert [c["name"] for c in manifest.agent_pod["containers"]] == ["agent"]


def test_git_sync_uses_v4_env_names_and_the_contract_layout() -> None:
    manifest = render(PLUGINS)
    weather = env_map(manifest.container("git-sync-weather"))
    assert weather["GITSYNC_REPO"] == WEATHER["repo"]
    assert weather["GITSYNC_REF"] == "v1"
    assert weather["GITSYNC_ROOT"] == "/opt/data/.git-sync/weather"
    assert weather["GITSYNC_LINK"] == "current"
    assert weather["GITSYNC_DEPTH"] == "1"
    assert weather["GITSYNC_PERIOD"] == "60s"
    assert weather["GITSYNC_GROUP_WRITE"] == "true"
    tickets = env_map(manifest.container("git-sync-tickets"))
    assert tickets["GITSYNC_DEPTH"] == "0"  # an explicit 0 (full history) is kept
    assert tickets["GITSYNC_PERIOD"] == "10s"
    # Every variable is a real git-sync v4 name (v3 used GIT_SYNC_*).
    assert all(re.fullmatch(r"GITSYNC_[A-Z_]+|HOME", name) for name in tickets)


def test_git_sync_runs_as_65533_sharing_files_through_fs_group() -> None:
    manifest = render(PLUGINS)
    context = manifest.container("git-sync-weather")["securityContext"]
    assert context["runAsUser"] == 65533
    assert context["readOnlyRootFilesystem"] is True
    assert manifest.agent_pod["securityContext"]["fsGroup"] == 10000
    mounts = {m["mountPath"]: m for m in manifest.container("git-sync-weather")["volumeMounts"]}
    # Its own tree only: the plugin's own emptyDir.
    assert mounts["/opt/data/.git-sync/weather"] == {
        "name": "plugin-weather",
        "mountPath": "/opt/data/.git-sync/weather",
    }
    assert mounts["/tmp"]["subPath"] == "weather"  # HOME for git config, per plugin


def test_default_image_is_upstream_git_sync_v4() -> None:
    image = render(PLUGINS).container("git-sync-weather")["image"]
    assert re.fullmatch(r"registry\.k8s\.io/git-sync/git-sync:v4\.\d+\.\d+", image), image


def test_legacy_mode_syncs_once_in_init_then_keeps_syncing_in_a_sidecar() -> None:
    manifest = render(PLUGINS, kube_version="1.28.0")  # auto: no native sidecars before 1.29
    init = {c["name"]: c for c in manifest.agent_pod["initContainers"]}
    assert set(init) == {"git-sync-weather-init", "git-sync-tickets-init"}
    assert env_map(init["git-sync-weather-init"])["GITSYNC_ONE_TIME"] == "true"
    assert "restartPolicy" not in init["git-sync-weather-init"]
    sidecar = manifest.container("git-sync-weather")
    assert sidecar in manifest.agent_pod["containers"]
    assert "GITSYNC_ONE_TIME" not in env_map(sidecar)
    forced = render({**PLUGINS, "sidecarMode": "legacy"})
    assert "git-sync-weather-init" in container_names(forced.agent_pod)


def test_https_credentials_come_from_an_existing_secret() -> None:
    plugin = {**WEATHER, "auth": {"existingSecret": "git-creds"}}
    env = env_map(render({"plugins": [plugin]}).container("git-sync-weather"))
    assert env["GITSYNC_USERNAME"] == {
        "secretKeyRef": {"name": "git-creds", "key": "GITSYNC_USERNAME"}
    }
    assert env["GITSYNC_PASSWORD"] == {
        "secretKeyRef": {"name": "git-creds", "key": "GITSYNC_PASSWORD"}
    }


def test_ssh_key_from_a_secret_and_known_hosts_from_the_configmap() -> None:
    manifest = render(PLUGINS)
    container = manifest.container("git-sync-tickets")
    env = env_map(container)
    # v4 has no GITSYNC_SSH (its --ssh flag is deprecated: SSH follows from the repo URL).
    assert "GITSYNC_SSH" not in env
    assert env["GITSYNC_SSH_KEY_FILE"] == "/etc/git-secret/ssh"
    assert env["GITSYNC_SSH_KNOWN_HOSTS"] == "true"
    mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
    key_volume = next(
        v for v in manifest.agent_pod["volumes"] if v["name"] == mounts["/etc/git-secret"]["name"]
    )
    assert key_volume["secret"]["secretName"] == "git-ssh"
    known_hosts = mounts["/etc/git-known-hosts/known_hosts"]
    expected = "git.example.com ssh-ed25519 AAAA"
    assert manifest.configmap_file(known_hosts["subPath"]).strip() == expected


def test_plugin_spec_file_matches_the_contract() -> None:
    spec = yaml.safe_load(render(PLUGINS).configmap_file("plugins.yaml"))
    assert spec == {
        "plugins": [
            {"name": "weather", "subPath": "", "enabled": True},
            {"name": "tickets", "subPath": "plugin", "enabled": False},
        ]
    }
    assert yaml.safe_load(render().configmap_file("plugins.yaml")) == {"plugins": []}


def test_no_plugins_means_no_git_sync() -> None:
    manifest = render()
    assert "initContainers" not in manifest.agent_pod
    assert all("git-sync" not in str(v) for v in manifest.agent_pod["volumes"])


@pytest.mark.parametrize("kube", [NEWEST_KUBE, "1.28.0"])  # native sidecars, and init + sidecar
def test_each_git_sync_sees_only_its_own_tree_and_the_agent_reads_them_read_only(
    kube: str,
) -> None:
    """git-sync never mounts the data volume (conversations, lcm.db, state.db): each one
    writes only its plugin's own emptyDir, mounted where GITSYNC_ROOT points (the same path
    the agent reads, so the worktree paths git writes resolve there too); the agent mounts
    each tree read-only at /opt/data/.git-sync/<name>, the path the linker expects, so its
    shell cannot change a plugin's code."""
    manifest = render(PLUGINS, kube_version=kube)
    pod = manifest.agent_pod
    volumes = {v["name"]: v for v in pod["volumes"]}
    git_syncs = [c for c in all_containers(pod) if c["name"].startswith("git-sync-")]
    assert len(git_syncs) == 4 if kube == "1.28.0" else 2
    agent_mounts = manifest.container("agent")["volumeMounts"]
    for container in git_syncs:
        plugin = "weather" if "weather" in container["name"] else "tickets"
        root = env_map(container)["GITSYNC_ROOT"]
        mounts = {m["name"]: m for m in container["volumeMounts"]}
        assert "data" not in mounts, f"{container['name']} mounts the data volume"
        own = f"plugin-{plugin}"
        assert mounts[own] == {"name": own, "mountPath": root}
        assert root == f"/opt/data/.git-sync/{plugin}"
        assert "emptyDir" in volumes[own]
        assert {"name": own, "mountPath": root, "readOnly": True} in agent_mounts
        others = {f"plugin-{p}" for p in ("weather", "tickets")} - {own}
        assert not others & set(mounts), f"{container['name']} mounts another plugin's tree"
    # Nothing but a plugin's own git-sync writes into its tree.
    writers = {
        (c["name"], m["name"])
        for c in all_containers(pod)
        for m in c.get("volumeMounts", [])
        if m["name"].startswith("plugin-") and not m.get("readOnly")
    }
    assert writers == {
        (c["name"], "plugin-weather" if "weather" in c["name"] else "plugin-tickets")
        for c in git_syncs
    }
    # Without plugins, no tree and no mount.
    bare = render(kube_version=kube)
    assert not [v for v in bare.agent_pod["volumes"] if v["name"].startswith("plugin-")]
    assert not [m for m in bare.container("agent")["volumeMounts"] if "git-sync" in m["mountPath"]]


def test_each_plugin_tree_is_sized_from_its_own_cap() -> None:
    """4 x maxSizeMiB + 64 MiB: two worktrees and two commits' objects during a sync, plus
    git's own files; the default cap (100 MiB, the runtime's) gives 464Mi."""
    big = {**TICKETS, "maxSizeMiB": 300}
    volumes = {v["name"]: v for v in render({"plugins": [WEATHER, big]}).agent_pod["volumes"]}
    assert volumes["plugin-weather"]["emptyDir"] == {"sizeLimit": "464Mi"}
    assert volumes["plugin-tickets"]["emptyDir"] == {"sizeLimit": "1264Mi"}
    # The one shared tree of before is gone, and its value is refused naming the replacement.
    assert "git-sync" not in volumes
    error = render_error({**PLUGINS, "gitSync": {"sizeLimit": "300Mi"}})
    assert "gitSync.sizeLimit" in error and "plugins[].maxSizeMiB" in error


def test_submodules_are_off_unless_a_plugin_asks() -> None:
    """git-sync's own default clones every submodule, recursively: content the plugin's size
    cap never saw coming. Off (`--submodules=off`) unless `submodules: true`."""
    manifest = render({"plugins": [WEATHER, {**TICKETS, "submodules": True}]})
    assert env_map(manifest.container("git-sync-weather"))["GITSYNC_SUBMODULES"] == "off"
    assert env_map(manifest.container("git-sync-tickets"))["GITSYNC_SUBMODULES"] == "recursive"
    off = render({"plugins": [{**WEATHER, "submodules": False}]})
    assert env_map(off.container("git-sync-weather"))["GITSYNC_SUBMODULES"] == "off"
    assert "submodules" in render_error({"plugins": [{**WEATHER, "submodules": "yes"}]})
