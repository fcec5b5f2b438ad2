"""Run the commands the chart renders, with the real hermes-runtime CLI, on a scratch data dir.

The chart builds shell scripts and argument lists for the backup CronJob, the backup
sidecar and the restore init container; rendering them is not enough to know they
work. Here each one runs as the pod would run it: the container's env (with the
kubelet's $(VAR) expansion), /opt/data and /backup mapped to temporary directories.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from chart_testlib import env_map, render
from support.restic import restic_env

BIN = Path(sys.executable).parent


@pytest.fixture
def dirs(tmp_path: Path) -> dict[str, Path]:
    paths = {name: tmp_path / name for name in ("data", "backup", "restored", "tmp")}
    for path in paths.values():
        path.mkdir()
    (paths["data"] / "SOUL.md").write_text("You are the test agent.\n")
    (paths["data"] / "memories").mkdir()
    (paths["data"] / "memories" / "MEMORY.md").write_text("likes tea\n")
    git_sync = paths["data"] / ".git-sync" / "weather"
    git_sync.mkdir(parents=True)
    (git_sync / "plugin.yaml").write_text("name: weather\n")
    return paths


def _pod_env(container: dict, dirs: dict[str, Path]) -> dict[str, str]:
    """The container's literal env, remapped to the scratch dirs, plus PATH to the CLI."""
    env = {k: v for k, v in env_map(container).items() if isinstance(v, str)}
    env["HERMES_HOME"] = str(dirs["data"])
    env["HOME"] = str(dirs["tmp"])
    if env.get("BACKUP_TARGET") == "file:///backup":
        env["BACKUP_TARGET"] = f"file://{dirs['backup']}"
    if "BACKUP_WORK_DIR" in env:  # the scratch volume at /scratch
        env["BACKUP_WORK_DIR"] = str(dirs["tmp"])
        env["RESTIC_CACHE_DIR"] = str(dirs["tmp"] / "restic-cache")
    if "RESTIC_PASSWORD" in env_map(container):  # from the chart's Secret in a pod
        env.update(restic_env())
    if "BACKUP_STATUS_FILE" in env:  # the data volume's .hermes-runtime, mounted by subPath
        status = Path(env["BACKUP_STATUS_FILE"])
        if status.parent == Path("/run/hermes/backup-status"):
            env["BACKUP_STATUS_FILE"] = str(dirs["data"] / ".hermes-runtime" / status.name)
        else:
            env["BACKUP_STATUS_FILE"] = str(dirs["data"] / status.relative_to("/opt/data"))
    if "HERMES_RUNTIME_SECRETS_ENV" in env:
        env["HERMES_RUNTIME_SECRETS_ENV"] = str(dirs["tmp"] / "secrets.env")
    env["PATH"] = f"{BIN}:{os.environ['PATH']}"
    return env


def _argv(container: dict, env: dict[str, str], data_dir: Path) -> list[str]:
    """command + args after the kubelet's $(VAR) expansion, /opt/data remapped."""
    words = [*container.get("command", []), *container.get("args", [])]
    expanded = [re.sub(r"\$\((\w+)\)", lambda m: env[m.group(1)], w) for w in words]
    return [str(data_dir) if w == "/opt/data" else w for w in expanded]


def _snapshots(target: str) -> list[dict]:
    """Every agent's snapshots in the repository, each with its `agent`."""
    done = subprocess.run(
        [
            str(BIN / "hermes-runtime"),
            "backup",
            "list",
            "--target",
            target,
            "--json",
            "--all-agents",
        ],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
        env={**os.environ, **restic_env()},
    )
    snapshots: list[dict] = json.loads(done.stdout)
    return snapshots


def _cron_container(values: dict | None = None) -> dict:
    cron = render(values).backup_cronjob
    return cron["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"][0]


def test_cronjob_script_backs_up_then_restore_fills_an_empty_volume(
    dirs: dict[str, Path],
) -> None:
    container = _cron_container()
    env = _pod_env(container, dirs)
    done = subprocess.run(
        _argv(container, env, dirs["data"]), env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    snapshots = _snapshots(env["BACKUP_TARGET"])
    assert len(snapshots) == 1
    # Made as the release's own agent (<namespace>.<release>), not the legacy one.
    assert snapshots[0]["agent"] == env["HERMES_RUNTIME_AGENT"] == "agents.hermes"
    # The outcome the agent's /metrics exports, on the data volume.
    status = json.loads((dirs["data"] / ".hermes-runtime" / "backup-status.json").read_text())
    assert (status["snapshot"], status["last_attempt_ok"]) == (snapshots[0]["id"], True)

    restore = render({"restore": {"fromSnapshot": "latest"}}).container("restore")
    restore_env = _pod_env(restore, dirs)
    argv = _argv(restore, restore_env, dirs["restored"])
    done = subprocess.run(argv, env=restore_env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert (dirs["restored"] / "memories" / "MEMORY.md").read_text() == "likes tea\n"
    assert not (dirs["restored"] / ".git-sync").exists()  # excluded: git-sync refetches it

    # A restarted pod runs the init container again: --if-empty leaves the data alone.
    (dirs["restored"] / "SOUL.md").write_text("edited after restore\n")
    done = subprocess.run(argv, env=restore_env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert (dirs["restored"] / "SOUL.md").read_text() == "edited after restore\n"


def test_restore_from_replicas_runs_with_the_target_the_kubelet_expands(
    dirs: dict[str, Path],
) -> None:
    """restore.fromReplicas: `--replicas $(BACKUP_TARGET)/litestream` is what `backup
    restore` accepts (no replica there yet: the snapshot alone is restored)."""
    container = _cron_container()
    env = _pod_env(container, dirs)
    done = subprocess.run(
        _argv(container, env, dirs["data"]), env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    values = {
        "backup": {"continuous": {"enabled": True}},
        "restore": {"fromSnapshot": "latest", "fromReplicas": True},
    }
    restore = render(values).container("restore")
    restore_env = _pod_env(restore, dirs)
    argv = _argv(restore, restore_env, dirs["restored"])
    assert argv[argv.index("--replicas") + 1] == f"file://{dirs['backup']}/litestream"
    done = subprocess.run(argv, env=restore_env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert (dirs["restored"] / "memories" / "MEMORY.md").read_text() == "likes tea\n"


def test_cronjob_script_fails_when_the_backup_fails(dirs: dict[str, Path]) -> None:
    container = _cron_container()
    env = _pod_env(container, dirs)
    env["BACKUP_TARGET"] = f"file://{dirs['tmp']}/missing"
    done = subprocess.run(
        _argv(container, env, dirs["data"]), env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode != 0
    assert "missing" in done.stderr


def test_backup_script_reads_settings_from_the_vault_env_file(dirs: dict[str, Path]) -> None:
    values = {
        "vault": {
            "enabled": True,
            "address": "https://vault:8200",
            "role": "r",
            "backupRole": "r-backup",
            "secrets": [{"path": "secret/data/s3", "key": "id", "env": "AWS_ACCESS_KEY_ID"}],
        }
    }
    container = _cron_container(values)
    env = _pod_env(container, dirs)
    elsewhere = dirs["tmp"] / "from-vault"
    elsewhere.mkdir()
    # The file format `vault render` writes: NAME='value' lines a POSIX shell can source.
    Path(env["HERMES_RUNTIME_SECRETS_ENV"]).write_text(
        f"AWS_ACCESS_KEY_ID='AKIA'\\''quoted'\nBACKUP_TARGET='file://{elsewhere}'\n"
    )
    done = subprocess.run(
        _argv(container, env, dirs["data"]), env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    assert len(_snapshots(f"file://{elsewhere}")) == 1
    assert _snapshots(f"file://{dirs['backup']}") == []


def test_restore_with_vault_passes_arguments_through_unchanged(dirs: dict[str, Path]) -> None:
    values = {
        "restore": {"fromSnapshot": "latest"},
        "vault": {
            "enabled": True,
            "address": "https://vault:8200",
            "role": "r",
            "backupRole": "r-backup",
            "secrets": [{"path": "secret/data/s3", "key": "id", "env": "AWS_ACCESS_KEY_ID"}],
        },
    }
    restore = render(values).container("restore")
    env = _pod_env(restore, dirs)
    Path(env["HERMES_RUNTIME_SECRETS_ENV"]).write_text("UNUSED='x'\n")
    done = subprocess.run(
        _argv(restore, env, dirs["restored"]), env=env, capture_output=True, text=True, timeout=300
    )
    # Nothing was backed up yet: the real CLI must say so for the right target.
    assert done.returncode == 1
    assert f"file://{dirs['backup']} holds no snapshot" in done.stderr, done.stderr


def test_sidecar_loop_stops_cleanly_on_sigterm(dirs: dict[str, Path]) -> None:
    backup = render({"backup": {"mode": "sidecar", "interval": 3600}}).container("backup")
    env = _pod_env(backup, dirs)
    process = subprocess.Popen(
        _argv(backup, env, dirs["data"]),
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    try:
        time.sleep(0.5)
        assert process.poll() is None, "the loop exited before its first interval"
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=10) == 0
    finally:
        os.killpg(process.pid, signal.SIGKILL)  # the interrupted sleep, if still there
