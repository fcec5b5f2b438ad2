"""Realistic mistakes are refused at `helm template`, and the error names the field.

Each case is something a platform engineer plausibly writes (a copy-paste, a typo, a
Kubernetes habit) that would otherwise render fine and fail later in the cluster, or
never fail at all. The refusal comes from values.schema.json (one value at a time) or
from templates/validate.yaml (rules across values, readable messages); either way the
error must name the field, and the template messages must also say what to write.
"""

from __future__ import annotations

from typing import Any

import pytest
from chart_testlib import SERVICE_MONITOR_API, render, render_error

HTTPS = "https://git.example.com/team/weather.git"
SSH = "git@git.example.com:team/tickets.git"
KNOWN = "git.example.com ssh-ed25519 AAAA"


def plugin(name: str = "weather", repo: str = HTTPS, **extra: Any) -> dict[str, Any]:
    return {"name": name, "repo": repo, **extra}


def cron(schedule: str) -> dict[str, Any]:
    return {"backup": {"schedule": schedule}}


VAULT = {"path": "secret/data/hermes", "key": "k", "env": "LLM_API_KEY"}

# case -> (values, text the error must contain: the field, as path or dotted name)
SCHEMA_MISTAKES: dict[str, tuple[dict[str, Any], str]] = {
    "backup cpu negative": (
        {"backup": {"resources": {"requests": {"cpu": -1}}}},
        "/backup/resources/requests/cpu",
    ),
    "resources with a typo": ({"agent": {"resources": {"request": {"cpu": "1"}}}}, "request"),
    "env item without a name": ({"agent": {"env": [{"value": "blue"}]}}, "/agent/env/0"),
    "extraEnv item with value and valueFrom": (
        {"allPods": {"extraEnv": [{"name": "A", "value": "1", "valueFrom": {"fieldRef": {}}}]}},
        "/allPods/extraEnv/0",
    ),
    "env given as a map": ({"agent": {"env": {"TEAM": "blue"}}}, "/agent/env"),
    "env value not a string": (
        {"agent": {"env": [{"name": "RETRIES", "value": 3}]}},
        "/agent/env/0/value",
    ),
    "git-sync env item without a name": ({"gitSync": {"env": [{"value": "x"}]}}, "/gitSync/env/0"),
    "pull secret as {secret: x}": (
        {"imagePullSecrets": [{"secret": "regcred"}]},
        "/imagePullSecrets/0",
    ),
    "pull secret upper case": ({"imagePullSecrets": ["RegCred"]}, "/imagePullSecrets/0"),
    "restore from a word": ({"restore": {"fromSnapshot": "yesterday"}}, "/restore/fromSnapshot"),
    "restore from a date": ({"restore": {"fromSnapshot": "2026-11-29"}}, "/restore/fromSnapshot"),
    "liveness successThreshold above 1": (
        {"agent": {"livenessProbe": {"successThreshold": 2}}},
        "/agent/livenessProbe/successThreshold",
    ),
    "probe period zero": (
        {"agent": {"readinessProbe": {"periodSeconds": 0}}},
        "/agent/readinessProbe/periodSeconds",
    ),
    "probe with a handler": ({"agent": {"readinessProbe": {"httpGet": {"path": "/"}}}}, "httpGet"),
    "plugin name too long for its container": ({"plugins": [plugin("a" * 50)]}, "/plugins/0/name"),
    "plugin repo with a space": (
        {"plugins": [plugin(repo="https://git.example.com/a b.git")]},
        "/plugins/0/repo",
    ),
    "tag with a colon": ({"image": {"tag": "agent:0.1.0"}}, "/image/tag"),
    "registry with a scheme": (
        {"image": {"registry": "https://registry.example.com"}},
        "/image/registry",
    ),
    "annotation value not a string": (
        {"agent": {"podAnnotations": {"prometheus.io/port": 9090}}},
        "/agent/podAnnotations/prometheus.io~1port",
    ),
    "tolerations as a map": ({"agent": {"tolerations": {"key": "gpu"}}}, "/agent/tolerations"),
    "toleration operator typo": (
        {"allPods": {"tolerations": [{"key": "gpu", "operator": "Exist"}]}},
        "/allPods/tolerations/0/operator",
    ),
    "pdb maxUnavailable as words": (
        {"podDisruptionBudget": {"enabled": True, "maxUnavailable": "one"}},
        "/podDisruptionBudget/maxUnavailable",
    ),
    "S3 endpoint without a scheme": (
        {"backup": {"target": {"type": "s3", "s3": {"bucket": "bkt", "endpoint": "minio:9000"}}}},
        "/backup/target/s3/endpoint",
    ),
    "vault address without a scheme": ({"vault": {"address": "vault:8200"}}, "/vault/address"),
    "port out of range": ({"metrics": {"port": 90900}}, "/metrics/port"),
    "gateway port out of range": ({"apiServer": {"gatewayPort": 70000}}, "/apiServer/gatewayPort"),
    "host alias without an ip": (
        {"agent": {"hostAliases": [{"hostnames": ["llm.internal"]}]}},
        "/agent/hostAliases/0",
    ),
    "spread constraint without a topology key": (
        {
            "agent": {
                "topologySpreadConstraints": [{"maxSkew": 1, "whenUnsatisfiable": "DoNotSchedule"}]
            }
        },
        "/agent/topologySpreadConstraints/0",
    ),
    "OpenShift mode misspelt": (
        {"global": {"compatibility": {"openshift": {"adaptSecurityContext": "yes"}}}},
        "/global/compatibility/openshift/adaptSecurityContext",
    ),
    "extra volume without a name": (
        {"agent": {"extraVolumes": [{"emptyDir": {}}]}},
        "/agent/extraVolumes/0",
    ),
}

TEMPLATE_MISTAKES: dict[str, tuple[dict[str, Any], str]] = {
    # Quantities and schedules: the schema checks only their type, so the message is readable.
    "cpu with a doubled unit": (
        {"agent": {"resources": {"requests": {"cpu": "250mm"}}}},
        "agent.resources.requests.cpu",
    ),
    "memory written like a file size": (
        {"agent": {"resources": {"limits": {"memory": "2GB"}}}},
        "agent.resources.limits.memory",
    ),
    "git-sync memory with a space": (
        {"gitSync": {"resources": {"limits": {"memory": "128 Mi"}}}},
        "gitSync.resources.limits.memory",
    ),
    "backup cpu negative as text": (
        {"backup": {"resources": {"requests": {"cpu": "-1"}}}},
        "backup.resources.requests.cpu",
    ),
    "cron with four fields": (cron("0 3 * *"), "backup.schedule"),
    "two plugins with one name": ({"plugins": [plugin(), plugin(ref="v2")]}, "plugins[1].name"),
    "plugin named like the built-in lcm": ({"plugins": [plugin("lcm")]}, "plugins[0].name"),
    "plugin names equal once '_' is '-'": (
        {"plugins": [plugin("my_tool"), plugin("my-tool")]},
        "plugins[1].name",
    ),
    "SSH repo without SSH auth": (
        {"plugins": [plugin("tickets", SSH)]},
        "plugins[0].auth.sshKeySecret",
    ),
    "ssh:// repo with only a password Secret": (
        {
            "plugins": [
                plugin(
                    "tickets",
                    "ssh://git@git.example.com/t.git",
                    auth={"existingSecret": "git-creds"},
                )
            ]
        },
        "plugins[0].auth.sshKeySecret",
    ),
    "SSH key on an https repo": (
        {"plugins": [plugin(auth={"sshKeySecret": "git-ssh", "knownHosts": KNOWN})]},
        "plugins[0].auth.sshKeySecret",
    ),
    "git-sync port on the API port": (
        {"plugins": [plugin()], "gitSync": {"httpPort": 8642}},
        "gitSync.httpPort+0",
    ),
    "second git-sync port on the metrics port": (
        {"plugins": [plugin("a"), plugin("b")], "gitSync": {"httpPort": 9089}},
        "gitSync.httpPort+1",
    ),
    "git-sync ports past 65535": (
        {"plugins": [plugin("a"), plugin("b")], "gitSync": {"httpPort": 65535}},
        "gitSync.httpPort+1",
    ),
    "metrics on the API port": ({"metrics": {"port": 8642}}, "metrics.port"),
    "gateway port behind the front door on the API port": (
        {"apiServer": {"gatewayPort": 8642}},
        "apiServer.gatewayPort",
    ),
    "git-sync port on the gateway's loopback port": (
        {"plugins": [plugin()], "gitSync": {"httpPort": 18642}},
        "gitSync.httpPort+0",
    ),
    "LCM metrics on the runtime metrics port": ({"metrics": {"lcmPort": 9090}}, "metrics.lcmPort"),
    "LCM target equal to threshold": (
        {"lcm": {"thresholdPercent": 0.6, "targetPercent": 0.6}},
        "lcm.targetPercent",
    ),
    "LCM target above threshold": (
        {"lcm": {"thresholdPercent": 0.5, "targetPercent": 0.7}},
        "lcm.targetPercent",
    ),
    "cron minute 61": (cron("61 3 * * *"), "backup.schedule"),
    "cron hour 24": (cron("0 24 * * *"), "backup.schedule"),
    "cron day 0": (cron("0 3 0 * *"), "backup.schedule"),
    "cron month 13": (cron("0 3 1 13 *"), "backup.schedule"),
    "cron weekday 8": (cron("0 3 * * 8"), "backup.schedule"),
    "cron step 0": (cron("*/0 * * * *"), "backup.schedule"),
    "cron backwards range": (cron("0 22-6 * * *"), "backup.schedule"),
    "cron weekday name typo": (cron("0 3 * * mon-fry"), "backup.schedule"),
    "model URL without a model": ({"llm": {"baseUrl": "https://api.openai.com/v1"}}, "llm.model"),
    "API key and existing Secret both": (
        {"apiServer": {"key": "0123456789abcdef0", "existingSecret": "hermes-api"}},
        "apiServer.key",
    ),
    "env overrides the chart's API key": (
        {"agent": {"env": [{"name": "API_SERVER_KEY", "value": "x"}]}},
        "agent.env[0].name",
    ),
    "extraEnv moves HERMES_HOME": (
        {"allPods": {"extraEnv": [{"name": "HERMES_HOME", "value": "/data"}]}},
        "allPods.extraEnv[0].name",
    ),
    "old top-level env": ({"env": [{"name": "TEAM", "value": "blue"}]}, "env"),
    "old top-level podSecurityContext": (
        {"podSecurityContext": {"runAsUser": 1000}},
        "podSecurityContext",
    ),
    "old top-level nodeSelector": ({"nodeSelector": {"pool": "agents"}}, "nodeSelector"),
    "vault on without a role": (
        {"vault": {"enabled": True, "address": "https://vault:8200", "secrets": [VAULT]}},
        "vault.role",
    ),
    "vault on without secrets": (
        {"vault": {"enabled": True, "address": "https://vault:8200", "role": "r"}},
        "vault.secrets",
    ),
    "two vault secrets into one variable": (
        {
            "vault": {
                "enabled": True,
                "address": "https://vault:8200",
                "role": "r",
                "secrets": [VAULT, {**VAULT, "key": "k2"}],
            }
        },
        "vault.secrets[1].env",
    ),
    "vault refresher without vault": (
        {"vault": {"refresher": {"enabled": True}}},
        "vault.refresher.enabled",
    ),
    "restore from S3 without a bucket": (
        {
            "backup": {"enabled": False, "target": {"type": "s3"}},
            "restore": {"fromSnapshot": "latest"},
        },
        "backup.target.s3.bucket",
    ),
    "backup password from Vault without a Vault secret for it": (
        {"backup": {"repository": {"fromVault": True}}},
        "backup.repository.fromVault",
    ),
    "ServiceMonitor without prometheus-operator": (
        {"metrics": {"serviceMonitor": {"enabled": True}}},
        "metrics.serviceMonitor.enabled",
    ),
    "ServiceMonitor with metrics off": (
        {"metrics": {"enabled": False, "serviceMonitor": {"enabled": True}}},
        "metrics.serviceMonitor.enabled",
    ),
}


@pytest.mark.parametrize("case", sorted(SCHEMA_MISTAKES))
def test_schema_refuses_the_mistake_naming_the_field(case: str) -> None:
    values, field = SCHEMA_MISTAKES[case]
    error = render_error(values)
    assert "values don't meet the specifications of the schema" in error, error
    assert field in error, error


@pytest.mark.parametrize("case", sorted(TEMPLATE_MISTAKES))
def test_validate_refuses_the_mistake_naming_the_field(case: str) -> None:
    values, field = TEMPLATE_MISTAKES[case]
    error = render_error(values)
    assert "values that cannot work" in error, error
    line = next((ln for ln in error.splitlines() if ln.startswith(f"- {field}")), None)
    assert line, f"no error line starts with {field!r}:\n{error}"
    # Say what to write instead, not only what is wrong.
    assert any(
        word in line
        for word in (
            "write",
            "set ",
            "use ",
            "rename",
            "pick",
            "name ",
            "give",
            "keep",
            "install",
            "enable",
            "change",
            "lower",
        )
    ), line


def test_native_sidecars_refused_on_a_cluster_without_them() -> None:
    error = render_error({"sidecarMode": "native"}, kube_version="1.28.0")
    line = next(ln for ln in error.splitlines() if ln.startswith("- sidecarMode"))
    assert "1.29" in line and "sidecarMode: auto" in line, line
    assert render({"sidecarMode": "native"}, kube_version="1.29.0").deployment


def test_every_problem_is_reported_at_once() -> None:
    error = render_error({"plugins": [plugin("lcm", SSH)], "lcm": {"targetPercent": 0.9}})
    assert "values that cannot work (3)" in error, error
    for field in ("plugins[0].name", "plugins[0].auth.sshKeySecret", "lcm.targetPercent"):
        assert f"- {field}" in error, error


def test_cron_message_is_readable() -> None:
    error = render_error(cron("61 3 * * *"))
    line = next(ln for ln in error.splitlines() if ln.startswith("- backup.schedule"))
    assert "minute" in line and "0-59" in line and "61" in line, line
    assert len(line) < 200 and "[0-9]" not in line, line


@pytest.mark.parametrize(
    "schedule",
    [
        "17 3 * * *",
        "*/15 1-5 * jan,feb mon-fri",
        "0 3 ? * SUN",
        "0 0/5 * * 7",
        "@daily",
        "5,35 */2 1-15/2 * *",
    ],
)
def test_good_cron_schedules_render(schedule: str) -> None:
    assert render(cron(schedule)).backup_cronjob["spec"]["schedule"] == schedule


def test_good_quantities_render() -> None:
    resources = {
        "requests": {"cpu": "250m", "memory": "512Mi"},
        "limits": {"cpu": 1.5, "memory": "1e9"},
    }
    agent = render({"agent": {"resources": resources}}).container("agent")
    assert agent["resources"] == resources


def test_snapshot_ids_from_backup_list_render() -> None:
    restore = render({"restore": {"fromSnapshot": "3fa2c1d4"}}).container("restore")
    assert "3fa2c1d4" in restore["args"]


def test_image_pull_secrets_in_both_forms_and_global() -> None:
    manifest = render(
        {
            "imagePullSecrets": ["plain", {"name": "k8s-form"}],
            "global": {"imagePullSecrets": [{"name": "shared"}, "plain"]},
        }
    )
    for _, pod in [
        ("agent", manifest.agent_pod),
        ("backup", manifest.backup_cronjob["spec"]["jobTemplate"]["spec"]["template"]["spec"]),
    ]:
        assert pod["imagePullSecrets"] == [
            {"name": "shared"},
            {"name": "plain"},
            {"name": "k8s-form"},
        ]


def test_global_image_registry_wins_for_every_image() -> None:
    manifest = render({"global": {"imageRegistry": "mirror.corp:5000"}, "plugins": [plugin()]})
    images = {
        c["name"]: c["image"]
        for c in manifest.agent_pod["initContainers"] + manifest.agent_pod["containers"]
    }
    assert images["agent"].startswith("mirror.corp:5000/hermes-runtime/agent:"), images
    assert images["git-sync-weather"] == "mirror.corp:5000/git-sync/git-sync:v4.7.0", images
    assert manifest.one("Pod")["spec"]["containers"][0]["image"].startswith("mirror.corp:5000/")


def test_global_storage_class_is_the_default_of_every_claim() -> None:
    claims = render({"global": {"storageClass": "fast"}, "persistence": {}}).all(
        "PersistentVolumeClaim"
    )
    assert {c["spec"]["storageClassName"] for c in claims} == {"fast"}
    own = render({"global": {"storageClass": "fast"}, "persistence": {"storageClass": "slow"}})
    classes = {
        c["metadata"]["name"]: c["spec"]["storageClassName"]
        for c in own.all("PersistentVolumeClaim")
    }
    assert classes == {"hermes-hermes-agent-data": "slow", "hermes-hermes-agent-backup": "fast"}


def test_service_monitor_renders_when_the_cluster_has_the_api() -> None:
    manifest = render(
        {"metrics": {"serviceMonitor": {"enabled": True}}}, api_versions=[SERVICE_MONITOR_API]
    )
    assert manifest.one("ServiceMonitor")


def test_at_least_forty_mistakes() -> None:
    assert len(SCHEMA_MISTAKES) + len(TEMPLATE_MISTAKES) >= 40
