"""git-sync per plugin: v4 flags, native or legacy sidecars, auth, and the plugin spec file."""

from __future__ import annotations

import re

import pytest
import yaml
from chart_testlib import NEWEST_KUBE, all_containers, container_names, env_map, render

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
    assert mounts["/opt/data/.git-sync/weather"]["subPath"] == "weather"  # its own tree only
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
    writes only its own directory of the `git-sync` emptyDir, mounted where GITSYNC_ROOT
    points (the same path the agent reads, so the worktree paths git writes resolve there
    too); the agent mounts the whole tree read-only over /opt/data/.git-sync, so its shell
    cannot change a plugin's code."""
    manifest = render({**PLUGINS, "gitSync": {"sizeLimit": "300Mi"}}, kube_version=kube)
    pod = manifest.agent_pod
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["git-sync"] == {"name": "git-sync", "emptyDir": {"sizeLimit": "300Mi"}}
    git_syncs = [c for c in all_containers(pod) if c["name"].startswith("git-sync-")]
    assert len(git_syncs) == 4 if kube == "1.28.0" else 2
    for container in git_syncs:
        plugin = "weather" if "weather" in container["name"] else "tickets"
        root = env_map(container)["GITSYNC_ROOT"]
        mounts = {m["name"]: m for m in container["volumeMounts"]}
        assert "data" not in mounts, f"{container['name']} mounts the data volume"
        assert mounts["git-sync"] == {"name": "git-sync", "mountPath": root, "subPath": plugin}
        assert root == f"/opt/data/.git-sync/{plugin}"
    agent_mounts = [m for m in manifest.container("agent")["volumeMounts"]]
    assert {"name": "git-sync", "mountPath": "/opt/data/.git-sync", "readOnly": True} in (
        agent_mounts
    )
    # Nothing but a plugin's own git-sync writes into the tree.
    writers = {
        c["name"]
        for c in all_containers(pod)
        for m in c.get("volumeMounts", [])
        if m["name"] == "git-sync" and not m.get("readOnly")
    }
    assert writers == {c["name"] for c in git_syncs}
    # Without plugins, no tree and no mount.
    bare = render(kube_version=kube)
    assert "git-sync" not in {v["name"] for v in bare.agent_pod["volumes"]}
    assert "git-sync" not in {m["name"] for m in bare.container("agent")["volumeMounts"]}
