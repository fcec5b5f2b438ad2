"""The agent pod: one writer, the contracts' env and mounts, seeds, secrets, probes."""

from __future__ import annotations

import base64
import hashlib
import json

import yaml
from chart_testlib import (
    FULLNAME,
    SERVICE_MONITOR_API,
    Manifest,
    all_containers,
    container_names,
    env_map,
    pod_specs,
    render,
    render_error,
    template,
)

from hermes_runtime.lcm.config import LcmConfig

LLM = {"llm": {"baseUrl": "http://llm:8000/v1", "model": "m1", "existingSecret": "llm-key"}}


def test_single_writer_deployment_replaced_while_the_old_pod_serves() -> None:
    deployment = render().deployment
    assert deployment["spec"]["replicas"] == 1
    # maxUnavailable 1: the old pod is deleted at once, whether or not the new one gets Ready.
    assert deployment["spec"]["strategy"] == {
        "type": "RollingUpdate",
        "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 1},
    }
    recreate = render({"agent": {"updateStrategy": "Recreate"}}).deployment
    assert recreate["spec"]["strategy"] == {"type": "Recreate"}


def test_an_unknown_update_strategy_is_refused_by_the_schema() -> None:
    result = render_error({"agent": {"updateStrategy": "OnDelete"}})
    assert "updateStrategy" in result and "RollingUpdate" in result


def test_data_pvc_kept_on_uninstall_and_mounted_at_opt_data() -> None:
    manifest = render({"persistence": {"size": "3Gi", "storageClass": "fast"}})
    pvc = manifest.one("PersistentVolumeClaim", f"{FULLNAME}-data")
    assert pvc["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"
    # Argo CD does not read Helm's keep: neither its prune nor an app deletion may take it.
    assert pvc["metadata"]["annotations"]["argocd.argoproj.io/sync-options"] == (
        "Prune=false,Delete=false"
    )
    assert pvc["spec"]["resources"]["requests"]["storage"] == "3Gi"
    assert pvc["spec"]["storageClassName"] == "fast"
    volumes = {v["name"]: v for v in manifest.agent_pod["volumes"]}
    assert volumes["data"]["persistentVolumeClaim"]["claimName"] == pvc["metadata"]["name"]
    mounts = {m["mountPath"]: m["name"] for m in manifest.container("agent")["volumeMounts"]}
    assert mounts["/opt/data"] == "data"


def test_existing_claim_replaces_the_chart_pvc() -> None:
    manifest = render({"persistence": {"existingClaim": "my-data"}})
    names = [p["metadata"]["name"] for p in manifest.all("PersistentVolumeClaim")]
    assert f"{FULLNAME}-data" not in names
    volumes = {v["name"]: v for v in manifest.agent_pod["volumes"]}
    assert volumes["data"]["persistentVolumeClaim"]["claimName"] == "my-data"


def test_agent_container_follows_the_entrypoint_contract() -> None:
    manifest = render({**LLM, "hermes": {"soul": "Be kind."}})
    agent = manifest.container("agent")
    assert "command" not in agent  # the image's ENTRYPOINT, catatonit, stays PID 1
    assert agent["args"] == ["hermes-runtime", "agent", "run"]
    env = env_map(agent)
    assert env["HERMES_HOME"] == "/opt/data"
    assert env["HERMES_RUNTIME_PLUGIN_SPEC"] == "/etc/hermes-runtime/plugins.yaml"
    assert env["HERMES_RUNTIME_SEED_CONFIG"] == "/etc/hermes-runtime/config.yaml"
    assert env["HERMES_RUNTIME_SEED_SOUL"] == "/etc/hermes-runtime/SOUL.md"
    assert env["HERMES_RUNTIME_METRICS_PORT"] == "9090"
    assert env["API_SERVER_ENABLED"] == "true"
    assert env["API_SERVER_HOST"] == "0.0.0.0"
    assert env["API_SERVER_PORT"] == "8642"
    assert env["LLM_API_KEY"] == {"secretKeyRef": {"name": "llm-key", "key": "api-key"}}
    assert "SOUL.md" in manifest.one("ConfigMap")["data"]


def test_writable_volumes_are_exactly_data_and_tmp() -> None:
    """Without Vault no secrets volume at all; with it, the agent's own, read-only
    (tests/chart/test_chart_secrets_per_container.py)."""
    manifest = render()
    mounts = {m["mountPath"]: m for m in manifest.container("agent")["volumeMounts"]}
    assert set(mounts) == {
        "/opt/data",
        "/tmp",
        "/etc/hermes-runtime",
        "/run/hermes-runtime",
        "/run/hermes/api-key",
    }
    assert mounts["/run/hermes/api-key"]["readOnly"] is True
    assert mounts["/etc/hermes-runtime"]["readOnly"] is True
    volumes = {v["name"]: v for v in manifest.agent_pod["volumes"]}
    assert not [name for name in volumes if name.startswith("secrets")]
    # Its own /tmp: no other role of the pod mounts it (test_chart_roles.py).
    assert mounts["/tmp"]["name"] == "tmp-agent"
    assert "emptyDir" in volumes["tmp-agent"]
    # The control socket of the exec preStop hook: in memory, and the agent container's alone.
    assert mounts["/run/hermes-runtime"]["name"] == "control"
    assert volumes["control"]["emptyDir"]["medium"] == "Memory"
    env = env_map(manifest.container("agent"))
    assert env["HERMES_RUNTIME_CONTROL_SOCKET"] == "/run/hermes-runtime/agent.sock"
    sidecars = render({"backup": {"mode": "sidecar", "continuous": {"enabled": True}}})
    for where, pod in [*pod_specs(manifest), *pod_specs(sidecars)]:
        for container in all_containers(pod):
            if container["name"] != "agent":
                names = {m["name"] for m in container.get("volumeMounts", [])}
                assert "control" not in names, f"{where}: {container['name']}"
    assert volumes["seed"]["configMap"]["name"] == FULLNAME


def test_probes_hit_health_on_the_api_port_and_readiness_the_entrypoint() -> None:
    agent = render({"apiServer": {"port": 9000}}).container("agent")
    ports = {p["name"]: p["containerPort"] for p in agent["ports"]}
    assert ports == {"http": 9000, "metrics": 9090, "lcm-metrics": 9091}
    for probe in ("startupProbe", "livenessProbe"):
        assert agent[probe]["httpGet"] == {"path": "/health", "port": "http"}
    assert agent["readinessProbe"]["httpGet"] == {"path": "/ready", "port": "metrics"}
    assert env_map(agent)["API_SERVER_PORT"] == "9000"


def test_the_hand_over_gets_its_timings_from_the_grace_period() -> None:
    manifest = render(
        {
            "agent": {
                "terminationGracePeriodSeconds": 45,
                "preStopSeconds": 4,
                "handoverWaitSeconds": 15,
            }
        }
    )
    agent = manifest.container("agent")
    assert manifest.agent_pod["terminationGracePeriodSeconds"] == 45
    # Started by the kubelet only: an exec in the container, over the entrypoint's Unix socket
    # (an httpGet on a port would let any pod stop the agent).
    assert agent["lifecycle"]["preStop"] == {
        "exec": {"command": ["hermes-runtime", "agent", "pre-stop"]}
    }
    env = env_map(agent)
    assert env["HERMES_RUNTIME_TERMINATION_GRACE_SECONDS"] == "45"
    assert env["HERMES_RUNTIME_PRESTOP_SECONDS"] == "4"
    assert env["HERMES_RUNTIME_HANDOVER_SECONDS"] == "15"
    assert env["HERMES_RUNTIME_LOCK_TIMEOUT"] == "300"
    assert env_map(render().container("agent"))["HERMES_RUNTIME_HANDOVER_SECONDS"] == "20"
    # Told to the pod being replaced, which forwards new clients here meanwhile.
    assert env["HERMES_RUNTIME_POD_IP"] == {"fieldRef": {"fieldPath": "status.podIP"}}


def test_the_gateway_keeps_idempotent_answers_as_long_as_the_value_says() -> None:
    assert env_map(render().container("agent"))["HERMES_RUNTIME_IDEMPOTENCY_TTL_SECONDS"] == "300"
    agent = render({"agent": {"idempotencyTtlSeconds": 0}}).container("agent")
    assert env_map(agent)["HERMES_RUNTIME_IDEMPOTENCY_TTL_SECONDS"] == "0"
    assert "idempotencyTtlSeconds" in render_error({"agent": {"idempotencyTtlSeconds": -1}})


def test_a_stop_sequence_as_long_as_the_grace_period_is_refused() -> None:
    result = render_error(
        {
            "agent": {
                "terminationGracePeriodSeconds": 30,
                "preStopSeconds": 5,
                "handoverWaitSeconds": 25,
            }
        }
    )
    assert (
        "agent.preStopSeconds + agent.handoverWaitSeconds must be shorter than "
        "agent.terminationGracePeriodSeconds (5 + 25 >= 30)"
    ) in result


def test_seed_config_sets_the_model_provider_and_lcm_without_secrets() -> None:
    manifest = render(
        {
            **LLM,
            "lcm": {"thresholdPercent": 0.6, "freshTailMessages": 10},
            "hermes": {"config": {"agent": {"max_turns": 7}, "context": {"extra": 1}}},
        }
    )
    config = yaml.safe_load(manifest.configmap_file("config.yaml"))
    assert config["model"] == {
        "provider": "custom",
        "base_url": "http://llm:8000/v1",
        "default": "m1",
        "api_key": "${LLM_API_KEY}",
    }
    assert config["context"] == {"engine": "lcm", "extra": 1}
    assert config["lcm"]["threshold_percent"] == 0.6
    assert config["lcm"]["fresh_tail_messages"] == 10
    assert "lcm" in config["plugins"]["enabled"]
    assert config["agent"] == {"max_turns": 7}


def test_group_commit_is_off_unless_asked_for() -> None:
    """Off by default (a turn is committed before its answer); a value turns it on."""
    default = yaml.safe_load(render({}).configmap_file("config.yaml"))
    assert "commit_interval_ms" not in default["lcm"]
    config = yaml.safe_load(render({"lcm": {"commitIntervalMs": 50}}).configmap_file("config.yaml"))
    assert config["lcm"]["commit_interval_ms"] == 50
    assert LcmConfig.for_home("/opt/data", config["lcm"]).commit_interval_ms == 50
    assert "/lcm/commitIntervalMs" in render_error({"lcm": {"commitIntervalMs": 20_000}})


def test_lcm_off_selects_hermes_compressor() -> None:
    config = yaml.safe_load(render({"lcm": {"enabled": False}}).configmap_file("config.yaml"))
    assert config["context"]["engine"] == "compressor"
    assert "lcm" not in config


def _generated(manifest: Manifest) -> list[str]:
    """What the secrets Job makes in the cluster (its --secret arguments)."""
    job = manifest.one("Job", f"{FULLNAME}-secrets")["spec"]["template"]["spec"]
    args = job["containers"][0]["args"]
    return [args[i + 1] for i, arg in enumerate(args) if arg == "--secret"]


def test_api_key_prefers_an_existing_secret() -> None:
    manifest = render({"apiServer": {"existingSecret": "my-api", "existingSecretKey": "token"}})
    assert f"{FULLNAME}-api" not in [s["metadata"]["name"] for s in manifest.all("Secret")]
    assert _generated(manifest) == [f"{FULLNAME}-backup-password/RESTIC_PASSWORD"]
    agent = manifest.container("agent")
    env = env_map(agent)
    assert "API_SERVER_KEY" not in env
    assert env["HERMES_RUNTIME_API_KEY_FILE"] == "/run/hermes/api-key/api-key"
    volumes = {v["name"]: v for v in manifest.agent_pod["volumes"]}
    assert volumes["api-key"]["secret"]["secretName"] == "my-api"
    assert volumes["api-key"]["secret"]["items"] == [{"key": "token", "path": "api-key"}]
    mounts = {m["name"]: m for m in agent["volumeMounts"]}
    assert mounts["api-key"] == {
        "name": "api-key",
        "mountPath": "/run/hermes/api-key",
        "readOnly": True,
    }


def test_api_key_value_goes_to_a_secret_never_a_configmap() -> None:
    key = "a-very-long-api-key-0123456789"
    manifest = render({"apiServer": {"key": key}})
    secret = manifest.one("Secret", f"{FULLNAME}-api")
    assert base64.b64decode(secret["data"]["api-key"]).decode() == key
    assert key not in str(manifest.all("ConfigMap"))
    assert key not in str(manifest.deployment)
    assert _generated(manifest) == [f"{FULLNAME}-backup-password/RESTIC_PASSWORD"]
    volumes = {v["name"]: v for v in manifest.agent_pod["volumes"]}
    assert volumes["api-key"]["secret"]["secretName"] == secret["metadata"]["name"]


def test_no_key_given_means_one_is_generated_in_the_cluster_never_in_the_render() -> None:
    """Two renders of the same values are the same bytes (Argo CD renders, then applies):
    the key is made once by the secrets Job (hermes-runtime secrets ensure, 48 characters,
    tests/e2e/test_gitops.py), never by the template."""
    first, second = template({}), template({})
    assert first.returncode == 0, first.stderr
    assert first.stdout == second.stdout
    manifest = render()
    assert f"{FULLNAME}-api" not in [s["metadata"]["name"] for s in manifest.all("Secret")]
    job = manifest.one("Job", f"{FULLNAME}-secrets")
    args = job["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args[:3] == ["hermes-runtime", "secrets", "ensure"]
    wanted = [args[i + 1] for i, arg in enumerate(args) if arg == "--secret"]
    assert wanted == [f"{FULLNAME}-api/api-key", f"{FULLNAME}-backup-password/RESTIC_PASSWORD"]
    hooks = job["metadata"]["annotations"]["helm.sh/hook"]
    assert hooks == "pre-install,pre-upgrade"


def test_config_checksum_restarts_the_pod_when_seeds_change() -> None:
    def checksum(values: dict) -> str:
        annotations = render(values).deployment["spec"]["template"]["metadata"]["annotations"]
        return annotations["checksum/config"]

    assert checksum({}) != checksum({"hermes": {"soul": "Different."}})
    assert checksum({}) == checksum({"backup": {"schedule": "1 1 * * *"}})


def test_image_tag_defaults_to_app_version_and_digest_wins() -> None:
    assert (
        render().container("agent")["image"] == "ghcr.io/hermes-runtime/hermes-runtime/agent:0.1.0"
    )
    digest = "sha256:" + "a" * 64
    image = {"registry": "reg.example", "tag": "9.9", "digest": digest}
    assert render({"image": image}).container("agent")["image"] == (
        f"reg.example/hermes-runtime/agent@{digest}"
    )


def test_service_account_token_not_mounted_by_default() -> None:
    manifest = render()
    assert manifest.agent_pod["automountServiceAccountToken"] is False
    agent_sa = manifest.one("ServiceAccount", FULLNAME)
    assert agent_sa["automountServiceAccountToken"] is False
    assert manifest.agent_pod["serviceAccountName"] == FULLNAME
    assert not [b for b in manifest.all("RoleBinding") if b["subjects"][0]["name"] == FULLNAME]
    # Only the secrets Job's pod holds a token, of its own ServiceAccount, which may read and
    # mark its two Secrets by name and create Secrets: nothing else.
    tokens = [
        (where, pod["serviceAccountName"])
        for where, pod in pod_specs(manifest)
        if pod.get("automountServiceAccountToken")
    ]
    assert tokens == [(f"Job/{FULLNAME}-secrets", f"{FULLNAME}-secrets")]
    role = manifest.one("Role", f"{FULLNAME}-secrets")
    assert role["rules"] == [
        {
            "apiGroups": [""],
            "resources": ["secrets"],
            "resourceNames": [f"{FULLNAME}-api", f"{FULLNAME}-backup-password"],
            "verbs": ["get", "patch"],
        },
        {"apiGroups": [""], "resources": ["secrets"], "verbs": ["create"]},
    ]


def test_service_exposes_api_and_metrics_to_the_agent_pod() -> None:
    manifest = render()
    pod_labels = manifest.deployment["spec"]["template"]["metadata"]["labels"]
    ports = {}
    for service in manifest.all("Service"):
        ports |= {p["name"]: p["port"] for p in service["spec"]["ports"]}
        assert service["spec"]["selector"].items() <= pod_labels.items()
    assert ports == {"http": 8642, "metrics": 9090, "lcm-metrics": 9091}


def test_lcm_metrics_port_follows_lcm_and_metrics() -> None:
    """LCM's counters live in the gateway process, so they get their own port."""
    agent = render({"metrics": {"lcmPort": 9100}}).container("agent")
    assert env_map(agent)["HERMES_RUNTIME_LCM_METRICS_PORT"] == "9100"
    assert {"name": "lcm-metrics", "containerPort": 9100, "protocol": "TCP"} in agent["ports"]
    for values in ({"lcm": {"enabled": False}}, {"metrics": {"enabled": False}}):
        manifest = render(values)
        agent = manifest.container("agent")
        assert "HERMES_RUNTIME_LCM_METRICS_PORT" not in env_map(agent)
        assert "lcm-metrics" not in {p["name"] for p in agent["ports"]}
        service_ports = {p["name"] for s in manifest.all("Service") for p in s["spec"]["ports"]}
        assert "lcm-metrics" not in service_ports


def test_service_monitor_and_pdb_are_opt_in() -> None:
    default = render()
    assert not default.has("ServiceMonitor") and not default.has("PodDisruptionBudget")
    manifest = render(
        {
            "metrics": {"serviceMonitor": {"enabled": True, "labels": {"release": "prom"}}},
            "podDisruptionBudget": {"enabled": True},
        },
        api_versions=[SERVICE_MONITOR_API],
    )
    monitor = manifest.one("ServiceMonitor")
    assert monitor["metadata"]["labels"]["release"] == "prom"
    assert [e["port"] for e in monitor["spec"]["endpoints"]] == ["metrics", "lcm-metrics"]
    metrics_service = manifest.one("Service", f"{FULLNAME}-metrics")
    selector = monitor["spec"]["selector"]["matchLabels"]
    assert selector.items() <= metrics_service["metadata"]["labels"].items()
    assert not selector.items() <= manifest.one("Service", FULLNAME)["metadata"]["labels"].items()
    # Scraped series keep job="<fullname>", the job the backup PrometheusRule matches.
    assert metrics_service["metadata"]["labels"][monitor["spec"]["jobLabel"]] == FULLNAME
    assert manifest.one("PodDisruptionBudget")["spec"]["maxUnavailable"] == 0


def test_extra_env_volumes_and_containers() -> None:
    sidecar = {"name": "shell", "image": "busybox", "securityContext": {}}
    manifest = render(
        {
            "allPods": {"extraEnv": [{"name": "TEAM", "value": "blue"}]},
            "agent": {
                "env": [{"name": "ONLY_AGENT", "value": "1"}],
                "envFrom": [{"configMapRef": {"name": "more"}}],
                "extraVolumes": [{"name": "extra", "emptyDir": {}}],
                "extraVolumeMounts": [{"name": "extra", "mountPath": "/extra"}],
                "extraContainers": [sidecar],
            },
            "plugins": [{"name": "weather", "repo": "https://git.example.com/w.git"}],
        }
    )
    agent = manifest.container("agent")
    assert env_map(agent)["TEAM"] == "blue"
    assert env_map(agent)["ONLY_AGENT"] == "1"
    assert agent["envFrom"] == [{"configMapRef": {"name": "more"}}]
    assert {"name": "extra", "mountPath": "/extra"} in agent["volumeMounts"]
    assert {"name": "extra", "emptyDir": {}} in manifest.agent_pod["volumes"]
    assert "shell" in container_names(manifest.agent_pod)
    backup_pod = manifest.backup_cronjob["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    assert env_map(backup_pod["containers"][0])["TEAM"] == "blue"
    assert "ONLY_AGENT" not in env_map(backup_pod["containers"][0])


def test_helm_test_pod_checks_health_and_metrics() -> None:
    pod = render().one("Pod")
    assert pod["metadata"]["annotations"]["helm.sh/hook"] == "test"
    args = pod["spec"]["containers"][0]["args"]
    assert args[:2] == ["python3", "-c"]
    assert args[3:] == [
        f"http://{FULLNAME}:8642/health",
        f"http://{FULLNAME}-metrics:9090/metrics",
    ]
    assert pod["metadata"]["labels"][f"{FULLNAME}-client"] == "true"


def _pod_annotations(values: dict) -> dict[str, str]:
    return dict(render(values).deployment["spec"]["template"]["metadata"]["annotations"])


def test_the_pod_template_carries_nothing_derived_from_the_key() -> None:
    """The pod template, which anyone allowed to read Deployments sees, holds no digest of the
    key or of its Secret (a digest lets whoever reads it test guesses of a chosen
    apiServer.key offline): the agent reads the key from the Secret's volume and restarts its
    gateway when the kubelet updates it, so no annotation has to follow the key."""
    key = "correct-horse-battery-staple"
    manifest = render({"apiServer": {"key": key}})
    annotations = _pod_annotations({"apiServer": {"key": key}})
    assert annotations == _pod_annotations({"apiServer": {"key": "b" * 20}})
    secret_yaml = yaml.safe_dump(manifest.one("Secret", f"{FULLNAME}-api"))
    digests = {
        hashlib.sha256(text.encode()).hexdigest()
        for text in (key, base64.b64encode(key.encode()).decode(), secret_yaml)
    }
    template = json.dumps(manifest.deployment)
    assert key not in template and not any(d in template for d in digests)


def _pods(manifest) -> dict[str, dict]:
    """Pod template (metadata + spec) of the agent, the backup job and the helm test."""
    cron = manifest.backup_cronjob["spec"]["jobTemplate"]["spec"]["template"]
    return {
        "agent": manifest.deployment["spec"]["template"],
        "backup": cron,
        "test": manifest.one("Pod"),
    }


def test_agent_settings_shape_only_the_agent_pod() -> None:
    spread = {
        "maxSkew": 1,
        "topologyKey": "topology.kubernetes.io/zone",
        "whenUnsatisfiable": "ScheduleAnyway",
    }
    alias = {"ip": "10.0.0.9", "hostnames": ["llm.internal"]}
    manifest = render(
        {
            "agent": {
                "podLabels": {"team": "blue"},
                "podAnnotations": {"owner": "ops"},
                "nodeSelector": {"pool": "agents"},
                "priorityClassName": "high",
                "topologySpreadConstraints": [spread],
                "hostAliases": [alias],
            }
        }
    )
    pods = _pods(manifest)
    agent = pods["agent"]
    assert agent["metadata"]["labels"]["team"] == "blue"
    assert agent["metadata"]["annotations"]["owner"] == "ops"
    assert agent["spec"]["nodeSelector"] == {"pool": "agents"}
    assert agent["spec"]["priorityClassName"] == "high"
    assert agent["spec"]["topologySpreadConstraints"] == [spread]
    assert agent["spec"]["hostAliases"] == [alias]
    for name in ("backup", "test"):
        assert "team" not in pods[name]["metadata"]["labels"], name
        for key in (
            "nodeSelector",
            "priorityClassName",
            "topologySpreadConstraints",
            "hostAliases",
        ):
            assert key not in pods[name]["spec"], (name, key)


def test_all_pods_settings_reach_every_pod() -> None:
    toleration = {"key": "dedicated", "operator": "Exists"}
    manifest = render(
        {
            "allPods": {
                "podLabels": {"cost-center": "42"},
                "podAnnotations": {"audit": "yes"},
                "tolerations": [toleration],
                "podSecurityContext": {
                    "runAsNonRoot": True,
                    "runAsUser": 2000,
                    "fsGroup": 2000,
                    "seccompProfile": {"type": "RuntimeDefault"},
                },
            },
            "agent": {"tolerations": [{"key": "agents", "operator": "Exists"}]},
        }
    )
    for name, pod in _pods(manifest).items():
        assert pod["metadata"]["labels"]["cost-center"] == "42", name
        assert pod["metadata"]["annotations"]["audit"] == "yes", name
        assert toleration in pod["spec"]["tolerations"], name
        assert pod["spec"]["securityContext"]["runAsUser"] == 2000, name
    # The backup job runs on the agent's node, so it tolerates what the agent tolerates.
    backup = _pods(manifest)["backup"]["spec"]["tolerations"]
    assert {"key": "agents", "operator": "Exists"} in backup


def test_each_helper_container_has_its_own_resources() -> None:
    small = {"requests": {"cpu": "5m", "memory": "16Mi"}, "limits": {"memory": "32Mi"}}
    manifest = render(
        {
            "vault": {
                "enabled": True,
                "address": "https://vault:8200",
                "role": "r",
                "backupRole": "r-backup",
                "secrets": [{"path": "p", "key": "k", "env": "X"}],
                "resources": small,
                "refresher": {"enabled": True},
            },
            "restore": {
                "fromSnapshot": "latest",
                "resources": {**small, "limits": {"memory": "64Mi"}},
            },
            "gitSync": {
                "resources": {**small, "limits": {"memory": "48Mi"}},
                "startupProbe": {"periodSeconds": 3, "failureThreshold": 7},
            },
            "plugins": [{"name": "weather", "repo": "https://git.example.com/w.git"}],
            "tests": {"resources": {**small, "limits": {"memory": "24Mi"}}},
        }
    )
    assert manifest.container("vault-render")["resources"] == small
    assert manifest.container("vault-refresher")["resources"] == small
    assert manifest.container("restore")["resources"]["limits"]["memory"] == "64Mi"
    git_sync = manifest.container("git-sync-weather")
    assert git_sync["resources"]["limits"]["memory"] == "48Mi"
    assert git_sync["startupProbe"]["periodSeconds"] == 3
    assert git_sync["startupProbe"]["failureThreshold"] == 7
    assert manifest.one("Pod")["spec"]["containers"][0]["resources"]["limits"]["memory"] == "24Mi"


def _uids(manifest) -> list[object]:
    found = []
    for pod in _pods(manifest).values():
        found += [
            pod["spec"]["securityContext"].get(k) for k in ("runAsUser", "runAsGroup", "fsGroup")
        ]
        for c in pod["spec"].get("initContainers", []) + pod["spec"]["containers"]:
            found += [c["securityContext"].get(k) for k in ("runAsUser", "runAsGroup")]
    return [uid for uid in found if uid is not None]


def test_openshift_gets_uids_from_the_platform() -> None:
    plugin = {"plugins": [{"name": "weather", "repo": "https://git.example.com/w.git"}]}
    assert 65533 in _uids(render(plugin)) and 10000 in _uids(render(plugin))
    # auto: only where the cluster serves OpenShift's security API.
    assert _uids(render(plugin, api_versions=["security.openshift.io/v1"])) == []
    forced = {
        **plugin,
        "global": {"compatibility": {"openshift": {"adaptSecurityContext": "force"}}},
    }
    assert _uids(render(forced)) == []
    off = {
        **plugin,
        "global": {"compatibility": {"openshift": {"adaptSecurityContext": "disabled"}}},
    }
    assert 10000 in _uids(render(off, api_versions=["security.openshift.io/v1"]))
    # Still restricted without UIDs: non-root stays required.
    for pod in _pods(render(forced)).values():
        assert pod["spec"]["securityContext"]["runAsNonRoot"] is True


def test_catatonit_stays_pid_1_in_every_container_of_ours() -> None:
    """`command:` would replace the image's ENTRYPOINT (catatonit --), leaving a process that
    does not reap orphans as PID 1; git-sync's image reaps as PID 1 by itself."""
    values = {
        **LLM,
        "vault": {
            "enabled": True,
            "address": "https://vault:8200",
            "role": "hermes",
            "backupRole": "hermes-backup",
            "secrets": [{"path": "secret/data/h", "key": "api", "env": "API_SERVER_KEY"}],
        },
        "restore": {"fromSnapshot": "latest"},
        "backup": {"enabled": True, "mode": "sidecar"},
        "plugins": [{"name": "weather", "repo": "https://git.example/weather.git"}],
    }
    seen = set()
    for values_set in (values, {**values, "backup": {"enabled": True, "mode": "cronjob"}}):
        for where, pod in pod_specs(render(values_set)):
            for container in all_containers(pod):
                if container["name"].startswith("git-sync"):
                    continue
                assert "command" not in container, f"{where} {container['name']} sets command"
                assert container["args"], f"{where} {container['name']} has no args"
                seen.add(container["name"])
    assert {"agent", "vault-render", "restore", "backup", "health"} <= seen


def test_the_data_volume_reserve_reaches_the_entrypoint_and_bad_values_are_refused() -> None:
    agent = render({"agent": {"dataVolume": {"minFreeMiB": 0}}}).container("agent")
    assert env_map(agent)["HERMES_RUNTIME_DATA_MIN_FREE_MIB"] == "0"
    assert env_map(render().container("agent"))["HERMES_RUNTIME_DATA_MIN_FREE_MIB"] == "64"
    for bad in (-1, "lots", 1.5, 1048577):
        assert "minFreeMiB" in render_error({"agent": {"dataVolume": {"minFreeMiB": bad}}})
    assert "dataVolume" in render_error({"agent": {"dataVolume": {"minFree": 8}}})


def test_the_front_door_cap_reaches_the_entrypoint_and_bad_values_are_refused() -> None:
    agent = render({"agent": {"frontDoorMaxHeld": 32}}).container("agent")
    assert env_map(agent)["HERMES_RUNTIME_FRONT_DOOR_MAX_HELD"] == "32"
    assert env_map(render().container("agent"))["HERMES_RUNTIME_FRONT_DOOR_MAX_HELD"] == "256"
    for bad in (0, "many"):
        assert "frontDoorMaxHeld" in render_error({"agent": {"frontDoorMaxHeld": bad}})
