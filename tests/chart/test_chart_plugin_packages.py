"""pluginPackages: the plugin-deps container that installs the packages plugins declare.

The requirements it installs are untrusted input (whoever can push to a plugin writes them),
so the installer is not the agent and holds nothing the agent holds: its own UID, no LLM, API,
Vault, S3 or git credential, no ServiceAccount token; it writes only the data volume's
`.plugin-packages` folder, which the agent mounts read-only so that its shell cannot swap a
package the gateway imports. The pod reaches the index (and only with the sidecar), and the
values refuse an index without which nothing could install, or one whose credentials would
sit in the rendered objects.
"""

from __future__ import annotations

from typing import Any

import pytest
from chart_testlib import Manifest, all_containers, container_names, env_map, render, render_error
from pss import restricted_violations

INDEX = "http://pypi.mirror.svc:3141/root/pypi/+simple/"
PLUGINS = [{"name": "weather", "repo": "https://git.example.com/w.git"}]
ON: dict[str, Any] = {
    "plugins": PLUGINS,
    "pluginPackages": {"enabled": True, "indexUrl": INDEX},
}
LEGACY = "1.28.0"
PACKAGES = "/opt/data/.plugin-packages"


def deps(manifest: Manifest) -> dict:
    return manifest.container("plugin-deps")


def mounts_at(container: dict) -> dict[str, dict]:
    return {m["mountPath"]: m for m in container["volumeMounts"]}


def agent_egress(manifest: Manifest) -> list[dict]:
    (policy,) = [
        p
        for p in manifest.all("NetworkPolicy")
        if p["spec"]["podSelector"].get("matchLabels", {}).get("app.kubernetes.io/component")
        == "agent"
    ]
    return policy["spec"]["egress"]


def ports_to_namespace(egress: list[dict], namespace: str) -> set[int]:
    return {
        int(port["port"])
        for rule in egress
        for peer in rule.get("to", [])
        if peer.get("namespaceSelector", {})
        .get("matchLabels", {})
        .get("kubernetes.io/metadata.name")
        == namespace
        for port in rule.get("ports", [])
    }


@pytest.mark.parametrize(
    "values",
    [None, {"plugins": PLUGINS}, {"pluginPackages": {"enabled": True, "indexUrl": INDEX}}],
    ids=["defaults", "plugins, off", "on, no plugins"],
)
def test_no_sidecar_unless_on_with_plugins(values: dict[str, Any] | None) -> None:
    manifest = render(values)
    assert "plugin-deps" not in container_names(manifest.agent_pod)
    assert PACKAGES not in mounts_at(manifest.container("agent"))
    assert "tmp-plugin-deps" not in {v["name"] for v in manifest.agent_pod["volumes"]}
    assert 3141 not in ports_to_namespace(agent_egress(manifest), "mirror")


def test_native_sidecar_after_the_git_sync_ones() -> None:
    pod = render(ON).agent_pod
    names = [c["name"] for c in pod["initContainers"]]
    assert names[-1] == "plugin-deps", names
    assert names.index("git-sync-weather") < names.index("plugin-deps")
    sidecar = pod["initContainers"][-1]
    assert sidecar["restartPolicy"] == "Always"
    assert "plugin-deps" not in [c["name"] for c in pod["containers"]]


def test_legacy_mode_runs_it_as_a_plain_container() -> None:
    pod = render(ON, kube_version=LEGACY).agent_pod
    assert "plugin-deps" not in [c["name"] for c in pod.get("initContainers", [])]
    (sidecar,) = [c for c in pod["containers"] if c["name"] == "plugin-deps"]
    assert "restartPolicy" not in sidecar


@pytest.mark.parametrize("kube", ["1.37.0", LEGACY])
def test_it_runs_install_deps_in_the_agent_image(kube: str) -> None:
    manifest = render(ON, kube_version=kube)
    sidecar = deps(manifest)
    assert sidecar["image"] == manifest.container("agent")["image"]
    assert "command" not in sidecar  # the image's ENTRYPOINT (catatonit) stays PID 1
    assert sidecar["args"] == [
        "hermes-runtime",
        "plugins",
        "install-deps",
        "--watch",
        "--interval",
        "5",
        "--max-size-mib",
        "512",
    ]
    env = env_map(sidecar)
    assert env["HERMES_HOME"] == "/opt/data"
    assert env["HERMES_RUNTIME_PLUGIN_INDEX_URL"] == INDEX
    spec = env["HERMES_RUNTIME_PLUGIN_SPEC"]
    assert spec == env_map(manifest.container("agent"))["HERMES_RUNTIME_PLUGIN_SPEC"]
    assert mounts_at(sidecar)[spec] == {
        "name": "seed",
        "mountPath": spec,
        "subPath": "plugins.yaml",
        "readOnly": True,
    }
    assert sidecar["resources"]["limits"]["memory"] == "256Mi"


def test_interval_and_size_cap_are_passed() -> None:
    values = {**ON, "pluginPackages": {**ON["pluginPackages"], "interval": 30, "maxSizeMiB": 0}}
    assert deps(render(values))["args"][-4:] == ["--interval", "30", "--max-size-mib", "0"]


def test_its_own_uid_and_pod_security_restricted() -> None:
    manifest = render(ON)
    context = deps(manifest)["securityContext"]
    assert context["runAsUser"] == 10005
    assert context["readOnlyRootFilesystem"] is True
    uids = {
        c["name"]: c.get("securityContext", {}).get("runAsUser")
        for c in all_containers(manifest.agent_pod)
    }
    assert list(uids.values()).count(10005) == 1, uids
    assert restricted_violations(manifest.agent_pod) == []


def test_a_uid_shared_with_another_role_is_refused() -> None:
    values = {**ON, "pluginPackages": {**ON["pluginPackages"]}}
    values["pluginPackages"]["containerSecurityContext"] = {"runAsUser": 10003}
    error = render_error(values)
    assert "pluginPackages.containerSecurityContext.runAsUser: UID 10003" in error, error
    assert "backup" in error


def test_mounts_trees_and_links_read_only_and_writes_only_its_folder() -> None:
    manifest = render(ON)
    mounts = mounts_at(deps(manifest))
    assert mounts["/tmp"]["name"] == "tmp-plugin-deps"
    assert mounts[PACKAGES] == {
        "name": "data",
        "mountPath": PACKAGES,
        "subPath": ".plugin-packages",
    }
    assert mounts["/opt/data/plugins"]["readOnly"] is True
    assert mounts["/opt/data/plugins"]["subPath"] == "plugins"
    assert mounts["/opt/data/.git-sync/weather"]["readOnly"] is True
    assert mounts["/opt/data/.git-sync/weather"]["name"] == "plugin-weather"
    writable = [m for m in mounts.values() if not m.get("readOnly")]
    assert sorted(m["mountPath"] for m in writable) == [PACKAGES, "/tmp"]
    # Never the whole data volume: not the conversations, lcm.db or state.db.
    assert all(m.get("subPath") for m in mounts.values() if m["name"] == "data")


def test_the_agent_mounts_the_packages_read_only() -> None:
    manifest = render(ON)
    agent = mounts_at(manifest.container("agent"))
    assert agent[PACKAGES] == {
        "name": "data",
        "mountPath": PACKAGES,
        "subPath": ".plugin-packages",
        "readOnly": True,
    }
    assert agent["/opt/data"].get("readOnly") is not True  # the rest of its volume is its own
    own_tmp = {v["name"]: v for v in manifest.agent_pod["volumes"]}["tmp-plugin-deps"]
    assert "emptyDir" in own_tmp


@pytest.mark.parametrize("kube", ["1.37.0", LEGACY])
def test_it_holds_no_credential(kube: str) -> None:
    """Everything that holds one is on (Vault, S3 restore and replication, git credentials,
    the LLM key): none of it reaches plugin-deps."""
    values: dict[str, Any] = {
        **ON,
        "plugins": [{**PLUGINS[0], "auth": {"existingSecret": "git-creds"}}],
        "llm": {"existingSecret": "llm-key"},
        "vault": {
            "enabled": True,
            "address": "https://vault.secrets.svc:8200",
            "role": "agent-role",
            "backupRole": "backup-role",
            "secrets": [{"path": "secret/data/a", "key": "tok", "env": "WEATHER_TOKEN"}],
        },
        "restore": {"fromSnapshot": "latest"},
        "backup": {
            "mode": "sidecar",
            "target": {"type": "s3", "s3": {"bucket": "bkt", "existingSecret": "s3-creds"}},
            "continuous": {"enabled": True},
        },
    }
    manifest = render(values, kube_version=kube)
    sidecar = deps(manifest)
    refs = [e for e in sidecar["env"] if "valueFrom" in e]
    assert refs == [], refs
    assert "envFrom" not in sidecar
    volumes = {v["name"]: v for v in manifest.agent_pod["volumes"]}
    for mount in sidecar["volumeMounts"]:
        volume = volumes[mount["name"]]
        assert "secret" not in volume and "projected" not in volume, mount
        assert not mount["name"].startswith("secrets-"), mount
    assert manifest.agent_pod["automountServiceAccountToken"] is False


def test_index_credentials_come_from_a_secret_to_this_container_only() -> None:
    values = {
        **ON,
        "pluginPackages": {**ON["pluginPackages"], "existingSecret": "index-creds"},
    }
    manifest = render(values)
    ref = env_map(deps(manifest))["HERMES_RUNTIME_PLUGIN_INDEX_URL"]
    assert ref == {"secretKeyRef": {"name": "index-creds", "key": "PLUGIN_INDEX_URL"}}
    for container in all_containers(manifest.agent_pod):
        if container["name"] == "plugin-deps":
            continue
        names = {e["name"] for e in container.get("env", [])}
        assert "HERMES_RUNTIME_PLUGIN_INDEX_URL" not in names, container["name"]
        text = repr(container)
        assert "index-creds" not in text, container["name"]


def test_egress_to_the_index_host_and_port() -> None:
    manifest = render(ON)
    assert 3141 in ports_to_namespace(agent_egress(manifest), "mirror")


def test_egress_to_a_public_index_on_443_and_an_override() -> None:
    public = {**ON, "pluginPackages": {"enabled": True, "indexUrl": "https://pypi.org/simple"}}
    rules = agent_egress(render(public))
    public_rules = [
        r for r in rules if any(p.get("ipBlock", {}).get("cidr") == "0.0.0.0/0" for p in r["to"])
    ]
    assert {int(p["port"]) for r in public_rules for p in r["ports"]} >= {443}
    peer = {"ipBlock": {"cidr": "10.20.30.40/32"}}
    given = {**public, "networkPolicy": {"egress": {"index": [peer]}}}
    rules = agent_egress(render(given))
    (rule,) = [r for r in rules if peer in r["to"]]
    assert [int(p["port"]) for p in rule["ports"]] == [443]


def test_enabled_without_an_index_is_refused() -> None:
    error = render_error({"plugins": PLUGINS, "pluginPackages": {"enabled": True}})
    assert "pluginPackages.indexUrl: pluginPackages.enabled needs the package index" in error


def test_credentials_in_the_index_url_are_refused_and_not_echoed() -> None:
    url = "https://user:s3cret@pypi.example.com/simple"
    error = render_error({**ON, "pluginPackages": {"enabled": True, "indexUrl": url}})
    assert "pluginPackages.indexUrl" in error and "existingSecret" in error, error
    assert "s3cret" not in error


@pytest.mark.parametrize("url", ["ftp://pypi.example.com/simple", "pypi.example.com/simple"])
def test_an_index_url_not_over_http_is_refused(url: str) -> None:
    error = render_error({**ON, "pluginPackages": {"enabled": True, "indexUrl": url}})
    assert "pluginPackages.indexUrl" in error, error


def test_the_schema_refuses_unknown_keys() -> None:
    error = render_error({**ON, "pluginPackages": {**ON["pluginPackages"], "requirements": []}})
    assert "requirements" in error and "pluginPackages" in error, error


@pytest.mark.parametrize("cap", [-1, 1.5, "512"])
def test_a_size_cap_that_is_not_a_whole_number_of_mib_is_refused(cap: object) -> None:
    error = render_error({**ON, "pluginPackages": {**ON["pluginPackages"], "maxSizeMiB": cap}})
    assert "maxSizeMiB" in error, error


def test_a_private_ca_reaches_the_installer_alone() -> None:
    values = {**ON, "pluginPackages": {**ON["pluginPackages"], "caSecret": "corp-ca"}}
    manifest = render(values)
    sidecar = deps(manifest)
    bundle = env_map(sidecar)["HERMES_RUNTIME_PLUGIN_INDEX_CA"]
    assert bundle == "/etc/hermes-runtime-index-ca/ca.crt"
    mount = mounts_at(sidecar)["/etc/hermes-runtime-index-ca"]
    assert mount == {
        "name": "plugin-index-ca",
        "mountPath": "/etc/hermes-runtime-index-ca",
        "readOnly": True,
    }
    pod = manifest.agent_pod
    [volume] = [v for v in pod["volumes"] if v["name"] == "plugin-index-ca"]
    assert volume["secret"]["secretName"] == "corp-ca"
    assert volume["secret"]["items"] == [{"key": "ca.crt", "path": "ca.crt"}]
    others = [c for c in pod["containers"] + pod.get("initContainers", []) if c is not sidecar]
    for container in others:
        names = {m["name"] for m in container.get("volumeMounts", [])}
        assert "plugin-index-ca" not in names, container["name"]


def test_without_a_private_ca_nothing_is_mounted() -> None:
    manifest = render(ON)
    assert "HERMES_RUNTIME_PLUGIN_INDEX_CA" not in env_map(deps(manifest))
    pod = manifest.agent_pod
    assert "plugin-index-ca" not in {v["name"] for v in pod["volumes"]}
