"""Vault: render into an in-memory file before anything else, with a projected token."""

from __future__ import annotations

from chart_testlib import FULLNAME, env_map, render
from pss import restricted_violations

VAULT = {
    "vault": {
        "enabled": True,
        "address": "https://vault.example:8200",
        "role": "hermes",
        "authPath": "k8s-prod",
        "audience": "vault-prod",
        "caSecret": "vault-ca",
        "secrets": [
            {"path": "secret/data/hermes", "key": "api", "env": "API_SERVER_KEY"},
            {"path": "secret/data/hermes", "key": "llm", "env": "LLM_API_KEY"},
            {"path": "secret/data/s3", "key": "id", "env": "AWS_ACCESS_KEY_ID"},
        ],
    }
}


def _with(**changes: object) -> dict:
    return {"vault": {**VAULT["vault"], **changes}}


def test_render_init_container_runs_first_with_the_contract_arguments() -> None:
    manifest = render({**VAULT, "restore": {"fromSnapshot": "latest"}})
    init = manifest.agent_pod["initContainers"]
    assert [c["name"] for c in init] == ["vault-render", "restore"]
    render_container = init[0]
    assert "command" not in render_container
    args = render_container["args"][1:]
    assert render_container["args"][:3] == ["hermes-runtime", "vault", "render"]

    def after(flag: str) -> str:
        return args[args.index(flag) + 1]

    assert after("--addr") == "https://vault.example:8200"
    assert after("--auth") == "kubernetes"
    assert after("--role") == "hermes"
    assert after("--auth-path") == "k8s-prod"
    assert after("--audience") == "vault-prod"
    assert after("--out") == "/run/hermes/secrets/env"
    assert after("--ca-cert") == "/etc/hermes-runtime-vault-ca/ca.crt"
    secrets = [args[i + 1] for i, a in enumerate(args) if a == "--secret"]
    assert secrets == [
        "secret/data/hermes#api=API_SERVER_KEY",
        "secret/data/hermes#llm=LLM_API_KEY",
        "secret/data/s3#id=AWS_ACCESS_KEY_ID",
    ]
    assert "--refresh" not in args


def test_projected_token_carries_the_audience_and_automount_stays_off() -> None:
    manifest = render(VAULT)
    pod = manifest.agent_pod
    assert pod["automountServiceAccountToken"] is False
    volumes = {v["name"]: v for v in pod["volumes"]}
    source = volumes["vault-token"]["projected"]["sources"][0]["serviceAccountToken"]
    assert source["audience"] == "vault-prod"
    assert source["path"] == "token"
    render_container = manifest.container("vault-render")
    args = render_container["args"]
    jwt = args[args.index("--jwt-file") + 1]
    mounts = {m["name"]: m["mountPath"] for m in render_container["volumeMounts"]}
    assert jwt == f"{mounts['vault-token']}/token"
    assert volumes["vault-ca"]["secret"]["secretName"] == "vault-ca"


def test_secrets_file_is_in_memory_and_shared_with_the_agent() -> None:
    manifest = render(VAULT)
    volumes = {v["name"]: v for v in manifest.agent_pod["volumes"]}
    assert volumes["secrets"]["emptyDir"]["medium"] == "Memory"
    for name in ("vault-render", "agent"):
        mounts = {m["mountPath"]: m["name"] for m in manifest.container(name)["volumeMounts"]}
        assert mounts["/run/hermes/secrets"] == "secrets"
    env = env_map(manifest.container("agent"))
    assert env["HERMES_RUNTIME_SECRETS_ENV"] == "/run/hermes/secrets/env"


def test_vault_provided_api_key_replaces_the_kubernetes_secret() -> None:
    manifest = render(VAULT)
    # The only Secret left is the restic repository password (not in vault.secrets here).
    names = [s["metadata"]["name"] for s in manifest.all("Secret")]
    assert names == [f"{FULLNAME}-backup-password"]
    assert "API_SERVER_KEY" not in env_map(manifest.container("agent"))


def test_refresher_is_a_native_sidecar_or_a_container_on_old_clusters() -> None:
    values = _with(refresher={"enabled": True, "interval": 120})
    native = render(values)
    refresher = native.container("vault-refresher")
    assert refresher in native.agent_pod["initContainers"]
    assert refresher["restartPolicy"] == "Always"
    assert refresher["args"][-2:] == ["--refresh", "120"]
    legacy = render(values, kube_version="1.28.0")
    refresher = legacy.container("vault-refresher")
    assert refresher in legacy.agent_pod["containers"]
    assert "restartPolicy" not in refresher


def test_backup_job_loads_s3_credentials_from_vault() -> None:
    values = {
        **VAULT,
        "backup": {"target": {"type": "s3", "s3": {"bucket": "bkt-1", "region": "x"}}},
    }
    manifest = render(values)
    pod = manifest.one("CronJob")["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    assert [c["name"] for c in pod["initContainers"]] == ["vault-render"]
    backup = pod["containers"][0]
    assert env_map(backup)["HERMES_RUNTIME_SECRETS_ENV"] == "/run/hermes/secrets/env"
    assert '. "$HERMES_RUNTIME_SECRETS_ENV"' in backup["args"][2]
    assert "AWS_ACCESS_KEY_ID" not in env_map(backup)
    assert restricted_violations(pod) == []


def test_restore_with_vault_sources_the_env_file_without_reparsing_arguments() -> None:
    restore = render({**VAULT, "restore": {"fromSnapshot": "latest"}}).container("restore")
    args = restore["args"]
    assert args[:2] == ["/bin/sh", "-c"]
    assert 'exec "$@"' in args[2]
    assert args[3:7] == ["with-secrets", "hermes-runtime", "backup", "restore"]
