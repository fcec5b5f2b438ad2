"""`vault render --out-only`: one login, one env file per consumer, on a real OpenBao.

The chart's layout (docs/vault.md "One file per consumer"): the agent gets only its
model and API keys; the backup and restore containers the S3 keys and the restic
password; the replication sidecar the S3 keys without the password. Each test reads
the files back and checks that no value reached a file whose reader must not have it,
and that the refresher rewrites a file only when one of its OWN values rotates (the
agent restarts its gateway on every rewrite of its file).
"""

from __future__ import annotations

import stat
import time
import uuid
from pathlib import Path

import hvac
from support.wait import wait_until
from vault_testlib import (
    INTERVAL,
    SeededVault,
    assert_no_secret_leaked,
    file_value,
    refresher_files,
    run_vault_cli,
    temp_leftovers,
)

from hermes_runtime.vault import OutputFile, VaultSettings, read_env_file

AGENT_VARS = ("LLM_API_KEY", "API_SERVER_KEY")
S3_VARS = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")
BACKUP_VARS = (*S3_VARS, "RESTIC_PASSWORD")


def seed_consumers(client: hvac.Client) -> tuple[str, dict[str, str]]:
    """Two KV v2 paths (agent, backup) under a fresh name; returns (name, env -> value)."""
    name = f"consumers-{uuid.uuid4().hex[:8]}"
    values = {env: f"{env.lower()}-{uuid.uuid4()}" for env in (*AGENT_VARS, *BACKUP_VARS)}
    client.secrets.kv.v2.create_or_update_secret(
        path=f"{name}/agent", secret={env: values[env] for env in AGENT_VARS}, mount_point="secret"
    )
    client.secrets.kv.v2.create_or_update_secret(
        path=f"{name}/backup",
        secret={env: values[env] for env in BACKUP_VARS},
        mount_point="secret",
    )
    return name, values


def secret_args(name: str) -> list[str]:
    args: list[str] = []
    for env in AGENT_VARS:
        args += ["--secret", f"secret/data/{name}/agent#{env}={env}"]
    for env in BACKUP_VARS:
        args += ["--secret", f"secret/data/{name}/backup#{env}={env}"]
    return args


def consumer_files(root: Path) -> dict[str, tuple[Path, tuple[str, ...]]]:
    """What the chart renders in an agent pod with restore and replication on."""
    return {
        "agent": (root / "agent" / "env", AGENT_VARS),
        "backup": (root / "backup" / "env", BACKUP_VARS),
        "restore": (root / "restore" / "env", BACKUP_VARS),
        "replicate": (root / "replicate" / "env", S3_VARS),
    }


def assert_only_own_values(path: Path, own: tuple[str, ...], values: dict[str, str]) -> None:
    """The file parses to exactly its variables, and no other value is in its bytes."""
    assert read_env_file(path) == {env: values[env] for env in own}, path
    raw = path.read_text()
    for env, value in values.items():
        if env not in own:
            assert value not in raw, f"{env} reached {path}"
    assert stat.S_IMODE(path.stat().st_mode) == 0o640  # the consumer reads it as the group


def test_one_login_renders_each_consumer_only_its_own_secrets(
    vault: SeededVault, tmp_path: Path
) -> None:
    name, values = seed_consumers(vault.server.client())
    files = consumer_files(tmp_path)
    outs = [f"--out-only={path}={','.join(env)}" for path, env in files.values()]
    run = run_vault_cli(
        "render",
        "--addr",
        vault.addr,
        "--auth",
        "token",
        *secret_args(name),
        *outs,
        env={"VAULT_TOKEN": vault.server.root_token},
    )
    assert run.returncode == 0, run.stderr
    for path, own in files.values():
        assert_only_own_values(path, own, values)
        assert temp_leftovers(path.parent) == []
    assert f"{files['replicate'][0]}: 2 variable(s), written" in run.stdout
    assert_no_secret_leaked(values, run.stdout, run.stderr, " ".join(run.argv))


def test_an_empty_list_writes_a_file_without_variables(vault: SeededVault, tmp_path: Path) -> None:
    name, values = seed_consumers(vault.server.client())
    idle = tmp_path / "replicate" / "env"
    run = run_vault_cli(
        "render",
        "--addr",
        vault.addr,
        "--auth",
        "token",
        "--secret",
        f"secret/data/{name}/agent#LLM_API_KEY=LLM_API_KEY",
        "--out-only",
        f"{tmp_path / 'agent' / 'env'}=LLM_API_KEY",
        "--out-only",
        f"{idle}=",
        env={"VAULT_TOKEN": vault.server.root_token},
    )
    assert run.returncode == 0, run.stderr
    assert read_env_file(idle) == {}
    assert values["LLM_API_KEY"] not in idle.read_text()


def test_a_missing_key_of_one_consumer_writes_no_file_at_all(
    vault: SeededVault, tmp_path: Path
) -> None:
    name, _ = seed_consumers(vault.server.client())
    agent, backup = tmp_path / "agent" / "env", tmp_path / "backup" / "env"
    run = run_vault_cli(
        "render",
        "--addr",
        vault.addr,
        "--auth",
        "token",
        "--secret",
        f"secret/data/{name}/agent#LLM_API_KEY=LLM_API_KEY",
        "--secret",
        f"secret/data/{name}/backup#NO_SUCH_KEY=RESTIC_PASSWORD",
        "--out-only",
        f"{agent}=LLM_API_KEY",
        "--out-only",
        f"{backup}=RESTIC_PASSWORD",
        env={"VAULT_TOKEN": vault.server.root_token},
    )
    assert run.returncode == 1
    assert "key 'NO_SUCH_KEY' not found" in run.stderr
    assert not agent.exists() and not backup.exists(), "a file was written before every read"


def test_refresher_rewrites_only_the_files_whose_values_rotated(
    vault: SeededVault, tmp_path: Path
) -> None:
    client = vault.server.client()
    name, values = seed_consumers(client)
    files = consumer_files(tmp_path)
    outputs = [OutputFile(path, env) for path, env in files.values()]
    settings = VaultSettings(addr=vault.addr, auth="token")
    specs = [arg for arg in secret_args(name) if arg != "--secret"]
    environ = {"VAULT_TOKEN": vault.server.root_token}
    with refresher_files(settings, specs, outputs, environ):
        inodes = {key: path.stat().st_ino for key, (path, _) in files.items()}
        rotated = f"rotated-{uuid.uuid4()}"
        backup_values = {env: values[env] for env in BACKUP_VARS} | {"RESTIC_PASSWORD": rotated}
        client.secrets.kv.v2.create_or_update_secret(
            path=f"{name}/backup", secret=backup_values, mount_point="secret"
        )
        backup, restore = files["backup"][0], files["restore"][0]
        wait_until(
            lambda: (
                file_value(backup, "RESTIC_PASSWORD") == rotated
                and file_value(restore, "RESTIC_PASSWORD") == rotated
            ),
            what="the rotated password in the backup and restore files",
        )
        time.sleep(INTERVAL * 5)  # several more ticks: nothing else may be rewritten
        assert files["agent"][0].stat().st_ino == inodes["agent"], "agent file rewritten"
        assert files["replicate"][0].stat().st_ino == inodes["replicate"], (
            "the replication file holds no password, yet was rewritten"
        )
        assert rotated not in files["agent"][0].read_text()
        assert rotated not in files["replicate"][0].read_text()
