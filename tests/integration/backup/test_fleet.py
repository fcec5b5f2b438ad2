"""A fleet sharing one target, one prefix and one password: every agent acts on its own only.

Two data dirs back up, prune, list, restore and replicate into the same restic repository and
the same replicas folder, each named by ``--agent`` (or ``$HERMES_RUNTIME_AGENT``, as the
chart passes it). One agent's prune never forgets the other's snapshots, its ``restore
latest`` never brings back the other's files, and its replica restore never reads the other's
databases.
"""

from __future__ import annotations

import json
import os
import subprocess
import threading
from pathlib import Path

import pytest
from backup_testlib import (
    BackupTarget,
    create_json,
    file_target,
    make_database,
    replica_keys,
    replicating,
    rows,
    run_cli,
)
from support.wait import wait_until

from hermes_runtime.backup import open_repository
from hermes_runtime.backup.restic import restic_binary

FIRST, SECOND = "team-a.hermes", "team-b.hermes"


def agent_dir(root: Path, name: str, rows_count: int) -> Path:
    """A data dir whose files say whose they are."""
    data = root / name
    data.mkdir()
    make_database(data / "state.db", rows_count)
    (data / "SOUL.md").write_text(f"I am {name}.\n")
    return data


def cli_json(target: BackupTarget, *args: str, agent: str | None = None) -> object:
    named = ("--agent", agent) if agent else ()
    result = run_cli(*args, "--target", target.url, *named, "--json", env=target.env)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def test_two_agents_on_one_target_never_prune_or_restore_each_other(
    target: BackupTarget, tmp_path: Path
) -> None:
    first = agent_dir(tmp_path, FIRST, 50)
    second = agent_dir(tmp_path, SECOND, 70)
    first_ids = [create_json(target, first, "--agent", FIRST)["id"] for _ in range(2)]
    second_id = create_json(target, second, "--agent", SECOND)["id"]

    pruned = cli_json(target, "prune", "--keep-last", "1", agent=FIRST)
    assert pruned == {"kept": [first_ids[1]], "deleted": [first_ids[0]], "dry_run": False}
    listed = cli_json(target, "list", agent=SECOND)
    assert [s["id"] for s in listed] == [second_id]  # the other agent's only snapshot stands
    assert listed[0]["agent"] == SECOND

    restored = tmp_path / "restored"
    cli_json(target, "restore", "--data-dir", str(restored), agent=FIRST)
    assert (restored / "SOUL.md").read_text() == f"I am {FIRST}.\n"
    assert rows(restored / "state.db", "SELECT count(*) FROM messages") == [(50,)]

    # another agent's snapshot is refused by id, naming its agent; named, it is restored
    other = run_cli(
        "restore", "--target", target.url, "--agent", FIRST, "--snapshot", second_id[:12],
        "--data-dir", str(tmp_path / "other"), env=target.env,
    )  # fmt: skip
    assert other.returncode == 1
    assert f"no single snapshot '{second_id[:12]}' of agent {FIRST}" in other.stderr
    assert f"{SECOND} (1)" in other.stderr and "--agent NAME" in other.stderr
    assert not (tmp_path / "other").exists()


def test_a_shared_repository_says_so_and_lists_every_agent_on_request(
    target: BackupTarget, tmp_path: Path
) -> None:
    for name in (FIRST, SECOND):
        create_json(target, agent_dir(tmp_path, name, 10), "--agent", name)
    listed = run_cli("list", "--target", target.url, "--agent", FIRST, env=target.env)
    assert listed.returncode == 0, listed.stderr
    assert len(listed.stdout.splitlines()) == 1
    assert f"is shared: it also holds snapshots of {SECOND} (1)" in listed.stderr
    every = cli_json(target, "list", "--all-agents", agent=FIRST)
    assert sorted(s["agent"] for s in every) == [FIRST, SECOND]


def test_the_agent_comes_from_the_environment_as_the_chart_passes_it(
    target: BackupTarget, tmp_path: Path
) -> None:
    data = agent_dir(tmp_path, FIRST, 5)
    env = {**target.env, "HERMES_RUNTIME_AGENT": FIRST}
    created = run_cli("create", "--data-dir", str(data), "--target", target.url, env=env)
    assert created.returncode == 0, created.stderr
    assert [s["agent"] for s in cli_json(target, "list", "--all-agents")] == [FIRST]
    # no name: the legacy agent, which has no snapshot here and is told whose there are
    legacy = run_cli("restore", "--target", target.url, "--data-dir", str(tmp_path / "x"),
                     env=target.env)  # fmt: skip
    assert legacy.returncode == 1
    assert "holds no snapshot of agent hermes-runtime" in legacy.stderr
    assert f"{FIRST} (1)" in legacy.stderr


@pytest.mark.parametrize("bad", ["team-a/hermes", "../x", "-x"])
def test_a_bad_agent_name_is_refused_before_any_work(
    target: BackupTarget, tmp_path: Path, bad: str
) -> None:
    flag = run_cli("list", "--target", target.url, "--agent", bad, env=target.env)
    assert flag.returncode == 2 and "--agent" in flag.stderr
    env = {**target.env, "HERMES_RUNTIME_AGENT": bad}
    variable = run_cli("list", "--target", target.url, env=env)
    assert variable.returncode == 1 and "HERMES_RUNTIME_AGENT" in variable.stderr


def test_two_agents_replicate_into_their_own_folders_and_restore_their_own(
    target: BackupTarget, tmp_path: Path
) -> None:
    first = agent_dir(tmp_path, FIRST, 40)
    second = agent_dir(tmp_path, SECOND, 90)
    with (
        replicating(target, first, tmp_path / "first.log", "--agent", FIRST),
        replicating(target, second, tmp_path / "second.log", "--agent", SECOND),
    ):
        for name in (FIRST, SECOND):
            wait_until(
                lambda name=name: replica_keys(target, "state.db", name), 60, f"{name}'s replica"
            )
    assert not replica_keys(target, "state.db")  # nothing in the legacy agent's folder

    restored = tmp_path / "restored"
    report = cli_json(
        target, "restore", "--data-dir", str(restored), "--replicas",
        f"{target.url}/litestream", agent=SECOND,
    )  # fmt: skip
    assert isinstance(report, dict) and report["snapshot"] is None  # the replicas alone
    assert report["sources"]["state.db"]["source"] == "litestream"
    assert rows(restored / "state.db", "SELECT count(*) FROM messages") == [(90,)]


def finish_stdin(fd: int) -> None:
    os.write(fd, b"the other agent's data\n")
    os.close(fd)


def test_a_prune_waits_for_another_agents_running_backup_instead_of_failing(
    tmp_path: Path,
) -> None:
    """A shared repository shares restic's locks: the exclusive one waits (``--retry-lock``).

    Another agent's backup holds its lock while it reads a pipe that this test keeps open;
    the prune started meanwhile must wait and then succeed, not fail at once on the lock.
    """
    target = file_target(tmp_path)
    create_json(target, agent_dir(tmp_path, FIRST, 5), "--agent", FIRST)
    repo = open_repository(target.url, environ={**os.environ, **target.env})
    read_end, write_end = os.pipe()
    holder = subprocess.Popen(
        [restic_binary(), "-r", repo.repository, "backup", "--host", SECOND, "--stdin"],
        stdin=read_end,
        env=dict(repo.env),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    os.close(read_end)
    locks = Path(repo.repository) / "locks"
    try:
        wait_until(lambda: any(locks.iterdir()), 30, "the other backup's lock")
        releaser = threading.Timer(3.0, finish_stdin, args=(write_end,))
        releaser.start()
        pruned = run_cli(
            "prune", "--target", target.url, "--agent", FIRST, "--keep-last", "1", "--json",
            env=target.env,
        )  # fmt: skip
        releaser.join()
    finally:
        holder.wait(30)
    assert holder.returncode == 0
    assert pruned.returncode == 0, pruned.stderr
    assert json.loads(pruned.stdout)["deleted"] == []


def test_a_new_folder_repository_is_the_pod_groups(tmp_path: Path) -> None:
    """The backup roles run as UIDs of their own (backup, verify, restore): a repository on
    the backup volume is shared through the pod's group, and restic keeps later files so."""
    target = file_target(tmp_path)
    create_json(target, agent_dir(tmp_path, FIRST, 5), "--agent", FIRST)
    assert target.root is not None
    config = target.root / "config"
    assert config.stat().st_mode & 0o040, oct(config.stat().st_mode)
    create_json(target, agent_dir(tmp_path, SECOND, 5), "--agent", SECOND)  # files made later
    for path in target.root.rglob("*"):
        mode = path.stat().st_mode
        assert mode & 0o040, f"{path}: {oct(mode)} (group cannot read)"
        if path.is_dir():
            assert mode & 0o070 == 0o070, f"{path}: {oct(mode)} (group cannot add files)"
