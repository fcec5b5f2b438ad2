"""`vault render` against a real OpenBao dev server: token, AppRole, KV v1/v2, failures."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest
from support.net import free_port
from vault_testlib import SeededVault, assert_no_secret_leaked, run_vault_cli, temp_leftovers

from hermes_runtime.vault import read_env_file

KV2_SPECS = [
    "--secret",
    "secret/data/hermes#OPENAI_API_KEY=OPENAI_API_KEY",
    "--secret",
    "secret/data/hermes#ANTHROPIC=ANTHROPIC_API_KEY",
]
KV1_SPEC = ["--secret", "kv1/hermes#AWS_SECRET_ACCESS_KEY=AWS_SECRET_ACCESS_KEY"]


def token_args(vault: SeededVault) -> list[str]:
    return ["--addr", vault.addr, "--auth", "token"]


def test_token_auth_renders_kv2_and_kv1_into_a_0640_env_file(
    vault: SeededVault, tmp_path: Path
) -> None:
    out = tmp_path / "secrets" / "env"
    run = run_vault_cli(
        "render",
        *token_args(vault),
        *KV2_SPECS,
        *KV1_SPEC,
        "--secret",
        "secret/data/hermes#PORT=API_PORT",
        "--out",
        str(out),
        env={"VAULT_TOKEN": vault.read_token},
    )
    assert run.returncode == 0, run.stderr
    assert stat.S_IMODE(out.stat().st_mode) == 0o640
    assert read_env_file(out) == {
        "OPENAI_API_KEY": vault.values["openai"],
        "ANTHROPIC_API_KEY": vault.values["anthropic"],
        "AWS_SECRET_ACCESS_KEY": vault.values["aws"],
        "API_PORT": "8642",
    }
    assert "rendered 4 secrets" in run.stderr
    assert_no_secret_leaked(vault.values, run.stdout, run.stderr, " ".join(run.argv))
    assert temp_leftovers(out.parent) == []


def test_approle_reads_role_and_secret_id_from_files(vault: SeededVault, tmp_path: Path) -> None:
    (tmp_path / "role-id").write_text(vault.role_id + "\n")
    (tmp_path / "secret-id").write_text(vault.secret_id + "\n")
    out = tmp_path / "env"
    run = run_vault_cli(
        "render",
        "--addr",
        vault.addr,
        "--auth",
        "approle",
        "--role-id-file",
        str(tmp_path / "role-id"),
        "--secret-id-file",
        str(tmp_path / "secret-id"),
        *KV1_SPEC,
        "--out",
        str(out),
    )
    assert run.returncode == 0, run.stderr
    assert read_env_file(out) == {"AWS_SECRET_ACCESS_KEY": vault.values["aws"]}
    assert vault.secret_id not in run.stderr + run.stdout


def test_wrong_approle_secret_id_fails_naming_the_auth_path(
    vault: SeededVault, tmp_path: Path
) -> None:
    (tmp_path / "role-id").write_text(vault.role_id)
    (tmp_path / "secret-id").write_text("not-the-secret-id")
    run = run_vault_cli(
        "render",
        "--addr",
        vault.addr,
        "--auth",
        "approle",
        "--role-id-file",
        str(tmp_path / "role-id"),
        "--secret-id-file",
        str(tmp_path / "secret-id"),
        *KV1_SPEC,
        "--out",
        str(tmp_path / "env"),
    )
    assert run.returncode == 1
    assert "auth/approle" in run.stderr
    assert "not-the-secret-id" not in run.stderr
    assert not (tmp_path / "env").exists()


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ("secret/data/nothing-here#X=X", "'secret/data/nothing-here' not found"),
        ("secret/hermes#X=X", "use 'secret/data/hermes'"),
        ("kv1/missing#X=X", "'kv1/missing' not found"),
        (
            "secret/data/hermes#NO_SUCH_KEY=X",
            "key 'NO_SUCH_KEY' not found in secret path 'secret/data/hermes'",
        ),
        ("kv1/hermes#NOPE=X", "key 'NOPE' not found in secret path 'kv1/hermes'"),
    ],
)
def test_missing_path_or_key_exits_1_and_keeps_the_old_file(
    vault: SeededVault, tmp_path: Path, spec: str, expected: str
) -> None:
    out = tmp_path / "env"
    out.write_text("KEEP='me'\n")
    before = out.stat()
    run = run_vault_cli(
        "render",
        *token_args(vault),
        *KV2_SPECS,
        "--secret",
        spec,
        "--out",
        str(out),
        env={"VAULT_TOKEN": vault.server.root_token},
    )
    assert run.returncode == 1
    assert expected in run.stderr
    assert vault.addr in run.stderr
    assert out.read_text() == "KEEP='me'\n"
    assert out.stat().st_mtime_ns == before.st_mtime_ns
    assert temp_leftovers(tmp_path) == []
    assert_no_secret_leaked(vault.values, run.stdout, run.stderr)


def test_path_outside_the_policy_is_denied_with_its_name(
    vault: SeededVault, tmp_path: Path
) -> None:
    vault.server.client().secrets.kv.v2.create_or_update_secret(
        path="other", secret={"K": "v"}, mount_point="secret"
    )
    run = run_vault_cli(
        "render",
        *token_args(vault),
        "--secret",
        "secret/data/other#K=K",
        "--out",
        str(tmp_path / "env"),
        env={"VAULT_TOKEN": vault.read_token},
    )
    assert run.returncode == 1
    assert "permission denied" in run.stderr
    assert "'secret/data/other'" in run.stderr
    assert not (tmp_path / "env").exists()


def test_wrong_token_exits_1_naming_the_address(vault: SeededVault, tmp_path: Path) -> None:
    run = run_vault_cli(
        "render",
        *token_args(vault),
        *KV2_SPECS,
        "--out",
        str(tmp_path / "env"),
        env={"VAULT_TOKEN": "s.this-token-does-not-exist"},
    )
    assert run.returncode == 1
    assert vault.addr in run.stderr
    assert "VAULT_TOKEN" in run.stderr
    assert "s.this-token-does-not-exist" not in run.stderr
    assert not (tmp_path / "env").exists()


def test_missing_vault_token_env_is_a_clear_failure(vault: SeededVault, tmp_path: Path) -> None:
    run = run_vault_cli("render", *token_args(vault), *KV2_SPECS, "--out", str(tmp_path / "env"))
    assert run.returncode == 1
    assert "VAULT_TOKEN" in run.stderr and "not set" in run.stderr


def test_unreachable_server_exits_1_naming_the_address(tmp_path: Path) -> None:
    addr = f"http://127.0.0.1:{free_port()}"
    out = tmp_path / "env"
    out.write_text("OLD='1'\n")
    run = run_vault_cli(
        "render",
        "--addr",
        addr,
        "--auth",
        "token",
        *KV2_SPECS,
        "--out",
        str(out),
        env={"VAULT_TOKEN": "anything"},
    )
    assert run.returncode == 1
    assert f"cannot reach Vault at {addr}" in run.stderr
    assert out.read_text() == "OLD='1'\n"


def test_out_inside_hermes_home_is_refused(vault: SeededVault, tmp_path: Path) -> None:
    home = tmp_path / "data"
    home.mkdir()
    run = run_vault_cli(
        "render",
        *token_args(vault),
        *KV2_SPECS,
        "--out",
        str(home / "secrets.env"),
        env={"VAULT_TOKEN": vault.read_token, "HERMES_HOME": str(home)},
    )
    assert run.returncode == 1
    assert "HERMES_HOME" in run.stderr
    assert not (home / "secrets.env").exists()


def test_rendering_twice_without_change_does_not_rewrite(
    vault: SeededVault, tmp_path: Path
) -> None:
    out = tmp_path / "env"
    args = ["render", *token_args(vault), *KV2_SPECS, "--out", str(out)]
    env = {"VAULT_TOKEN": vault.read_token}
    assert run_vault_cli(*args, env=env).returncode == 0
    first = out.stat()
    second = run_vault_cli(*args, env=env)
    assert second.returncode == 0
    assert out.stat().st_ino == first.st_ino
    assert '"written": false' in second.stderr


def test_exec_puts_secrets_in_the_child_environment_only(
    vault: SeededVault, tmp_path: Path
) -> None:
    expected = vault.values["openai"]
    check = (
        "import os, sys; "
        f"ok = os.environ['OPENAI_API_KEY'] == {expected!r}; "
        "ok = ok and 'VAULT_TOKEN' not in os.environ; "
        "sys.exit(0 if ok else 3)"
    )
    script = tmp_path / "check.py"
    script.write_text(check)
    run = run_vault_cli(
        "exec",
        *token_args(vault),
        *KV2_SPECS,
        "--",
        "python3",
        str(script),
        env={"VAULT_TOKEN": vault.read_token},
    )
    assert run.returncode == 0, run.stderr
    assert_no_secret_leaked(vault.values, run.stdout, run.stderr, " ".join(run.argv))


def test_exec_passes_the_child_exit_code_and_fails_clearly_without_command(
    vault: SeededVault,
) -> None:
    env = {"VAULT_TOKEN": vault.read_token}
    run = run_vault_cli("exec", *token_args(vault), *KV2_SPECS, "--", "sh", "-c", "exit 7", env=env)
    assert run.returncode == 7
    missing = run_vault_cli(
        "exec", *token_args(vault), *KV2_SPECS, "--", "no-such-cmd-xyz", env=env
    )
    assert missing.returncode == 1
    assert "no-such-cmd-xyz" in missing.stderr


def test_exec_fails_before_running_the_command_when_a_key_is_missing(
    vault: SeededVault, tmp_path: Path
) -> None:
    marker = tmp_path / "ran"
    run = run_vault_cli(
        "exec",
        *token_args(vault),
        "--secret",
        "kv1/hermes#NOPE=X",
        "--",
        "touch",
        str(marker),
        env={"VAULT_TOKEN": vault.read_token},
    )
    assert run.returncode == 1
    assert "'NOPE'" in run.stderr
    assert not marker.exists()


def test_unusable_out_path_is_named(vault: SeededVault, tmp_path: Path) -> None:
    env = {"VAULT_TOKEN": vault.read_token}
    as_dir = run_vault_cli(
        "render", *token_args(vault), *KV2_SPECS, "--out", str(tmp_path), env=env
    )
    assert as_dir.returncode == 1
    assert f"--out {tmp_path} is a directory" in as_dir.stderr
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("")
    under_file = run_vault_cli(
        "render", *token_args(vault), *KV2_SPECS, "--out", str(blocker / "env"), env=env
    )
    assert under_file.returncode == 1
    assert str(blocker / "env") in under_file.stderr
    assert "Traceback" not in as_dir.stderr + under_file.stderr
