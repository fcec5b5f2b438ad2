"""Faults: bad credentials, an outage mid-upload, kill -9, corruption, a full disk, a lock.

In every case the command fails with exit 1 and a message naming what is at
fault, and nothing half-done becomes visible: no snapshot is listed, the
data dir is left as it was.
"""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest
from backup_testlib import (
    BackupTarget,
    assert_left_as_it_was,
    file_target,
    forced_restore_over_data,
    run_cli,
    s3_target,
    tree_fingerprint,
)
from support.seaweedfs import SeaweedServer, seaweedfs_server

from hermes_runtime.backup import create_backup, open_repository
from hermes_runtime.common.errors import RuntimeFailure


def create_ok(target: BackupTarget, data_dir: Path) -> str:
    result = run_cli("create", "--data-dir", str(data_dir), "--target", target.url, env=target.env)
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


def add_many_files(data_dir: Path, count: int = 600, size: int = 40_000) -> None:
    bulk = data_dir / "outputs" / "bulk"
    bulk.mkdir(parents=True)
    for i in range(count):
        (bulk / f"part-{i:04d}.bin").write_bytes(os.urandom(size))


def start_create(target: BackupTarget, data_dir: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "hermes_runtime",
            "backup",
            "create",
            "--data-dir",
            str(data_dir),
            "--target",
            target.url,
        ],
        env={**os.environ, **target.env},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its own process group: restic's child with it
    )


def wait_for_blobs(target: BackupTarget, count: int, process: subprocess.Popen[str]) -> None:
    """Wait until restic has written ``count`` pack files (``data/`` in the repository)."""
    deadline = time.monotonic() + 60
    while len(target.object_keys("data/")) < count:
        assert process.poll() is None, "create finished before the fault could be injected"
        assert time.monotonic() < deadline, "create uploaded nothing"
        time.sleep(0.01)


def listed(target: BackupTarget) -> list[str]:
    result = run_cli("list", "--target", target.url, env=target.env)
    assert result.returncode == 0, result.stderr
    return [line.split()[0] for line in result.stdout.splitlines()]


def test_wrong_credentials_fail_naming_the_target(seaweed: SeaweedServer, data_dir: Path) -> None:
    target = s3_target(seaweed)
    env = {**target.env, "AWS_SECRET_ACCESS_KEY": "not-the-secret"}
    result = run_cli("create", "--data-dir", str(data_dir), "--target", target.url, env=env)
    assert result.returncode == 1
    assert target.url in result.stderr
    assert "access denied" in result.stderr.lower() or "signature" in result.stderr.lower()
    assert "not-the-secret" not in result.stderr
    assert target.object_keys() == []


def test_unreachable_endpoint_fails_naming_it(data_dir: Path) -> None:
    result = run_cli(
        "create",
        "--data-dir",
        str(data_dir),
        "--target",
        "s3://backups/agent",
        "--s3-endpoint",
        "http://127.0.0.1:9",
        env={"AWS_ACCESS_KEY_ID": "k", "AWS_SECRET_ACCESS_KEY": "s"},
    )
    assert result.returncode == 1
    assert "s3://backups/agent" in result.stderr and "127.0.0.1:9" in result.stderr


def test_target_going_away_briefly_mid_upload_is_ridden_out(data_dir: Path) -> None:
    """restic retries a backend that fails mid-upload: a short outage costs time, not the backup."""
    add_many_files(data_dir, count=1500)
    with seaweedfs_server() as server:
        target = s3_target(server)
        process = start_create(target, data_dir)
        wait_for_blobs(target, 1, process)
        server.stop()  # SIGKILL: the store vanishes in the middle of the upload
        time.sleep(2)
        server.start()
        _, stderr = process.communicate(timeout=600)
        assert process.returncode == 0, stderr
        snapshots = listed(target)
        assert len(snapshots) == 1
        verified = run_cli("verify", "--target", target.url, env=target.env)
        assert verified.returncode == 0, verified.stderr


class EventReader:
    """Reads a running command's structured stderr lines as they come (one thread)."""

    def __init__(self, process: subprocess.Popen[str]) -> None:
        assert process.stderr is not None
        self.process = process
        self.lines: queue.Queue[str] = queue.Queue()
        self.seen: list[str] = []
        threading.Thread(target=self._read, args=(process.stderr,), daemon=True).start()

    def _read(self, stderr: Iterable[str]) -> None:
        for line in stderr:
            self.lines.put(line)

    def wait_for(self, event: str, timeout: float) -> dict[str, Any]:
        """The next line ``event`` within ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                line = self.lines.get(timeout=0.5)
            except queue.Empty:
                assert self.process.poll() is None, f"exited; stderr: {self.seen[-10:]}"
                continue
            self.seen.append(line.strip())
            if line.startswith("{") and json.loads(line).get("event") == event:
                return dict(json.loads(line))
        raise AssertionError(f"no {event} line in {timeout} s; stderr: {self.seen[-10:]}")

    def first_naming(self, text: str, timeout: float) -> str:
        """The first line holding ``text`` within ``timeout`` s, running or exited since."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                line = self.lines.get(timeout=0.5)
            except queue.Empty:
                if self.process.poll() is not None and self.lines.empty():
                    break
                continue
            self.seen.append(line.strip())
            if text in line:
                return line
        raise AssertionError(f"no line naming {text} in {timeout} s; stderr: {self.seen[-10:]}")


def test_a_store_refusing_writes_is_named_while_create_waits(data_dir: Path) -> None:
    """restic retries a failing store for up to 15 minutes and says why only on its stderr.

    The store here answers every write to the backup's bucket with 500 (SeaweedFS capped at
    one volume, which another bucket holds): the operator must see restic's retries while
    `create` waits, not a silent hang (CI's failure in session 6).
    """
    with seaweedfs_server(volume_max=1) as server:
        server.create_bucket("holds-the-only-volume")
        server.client().put_object(Bucket="holds-the-only-volume", Key="object", Body=b"x")
        target = s3_target(server)
        process = start_create(target, data_dir)
        try:
            line = EventReader(process).wait_for("backup.create.restic", timeout=120)
        finally:
            process.kill()
            process.communicate(timeout=30)
        assert "retrying" in line["message"] or "error" in line["message"].lower(), line


def test_a_store_lost_during_restore_is_named_and_the_data_dir_stays_untouched(
    data_dir: Path, tmp_path: Path
) -> None:
    """A store that dies while restore runs is named, and the data dir stays untouched.

    The store dies right after the restore starts: restic's retries name it if restic is
    already talking to it, our reachability check does before restic starts (both happen,
    depending on the moment: restore resolves ``latest`` beside its first restic run).
    """
    add_many_files(data_dir)  # 24 MB: a restore that is still running when the store dies
    with seaweedfs_server() as server:
        target = s3_target(server)
        create_ok(target, data_dir)
        restored = tmp_path / "restored"
        restore = ["backup", "restore", "--target", target.url, "--data-dir", str(restored)]
        process = subprocess.Popen(
            [sys.executable, "-m", "hermes_runtime", *restore],
            env={**os.environ, **target.env},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        events = EventReader(process)
        try:
            events.wait_for("backup.restore.started", timeout=60)
            server.stop()
            line = events.first_naming(server.endpoint.removeprefix("http://"), timeout=120)
        finally:
            process.kill()
            process.communicate(timeout=30)
        assert "retrying" in line or "cannot reach the S3 endpoint" in line, line
        assert not restored.exists() or not any(restored.iterdir())


def test_kill_9_during_create_lists_no_half_snapshot(data_dir: Path, tmp_path: Path) -> None:
    target = file_target(tmp_path)
    first = create_ok(target, data_dir)
    add_many_files(data_dir, count=1500)  # 60 MB of random data: several 16 MiB packs
    process = start_create(target, data_dir)
    wait_for_blobs(target, len(target.object_keys("data/")) + 1, process)
    # As the kubelet kills a container (or the kernel a pod's PID namespace when its first
    # process dies): every process in it. Killing our process alone left its restic child
    # running for a while, holding the repository's lock when prune came (a flaky failure).
    os.killpg(process.pid, signal.SIGKILL)
    process.communicate(timeout=30)
    assert listed(target) == [first]
    restored = tmp_path / "restored"
    result = run_cli("restore", "--target", target.url, "--data-dir", str(restored))
    assert result.returncode == 0, result.stderr
    assert first in result.stdout
    assert not (restored / "outputs" / "bulk").exists()
    # the orphans of the killed run are collected by prune, the kept snapshot still verifies
    pruned = run_cli("prune", "--target", target.url, "--keep-last", "1", "--grace-seconds", "0")
    assert pruned.returncode == 0, pruned.stderr
    assert all(".partial-" not in key for key in target.object_keys())
    assert run_cli("verify", "--target", target.url).returncode == 0


def corrupt_every_pack(target: BackupTarget) -> None:
    """Flip one byte in the middle of every pack file of the repository."""
    for key in target.object_keys("data/"):
        body = bytearray(target.read(key))
        body[len(body) // 2] ^= 0x01
        if target.root is not None:
            (target.root / key).chmod(0o600)  # restic stores packs read-only
        target.write(key, bytes(body))


def test_a_flipped_byte_fails_verify_and_stops_restore(
    target: BackupTarget, data_dir: Path, tmp_path: Path
) -> None:
    snapshot = create_ok(target, data_dir)
    corrupt_every_pack(target)

    verify = run_cli("verify", "--target", target.url, "--snapshot", snapshot, env=target.env)
    assert verify.returncode == 1
    assert target.url in verify.stderr

    restore, existing = forced_restore_over_data(target, tmp_path)
    assert restore.returncode == 1
    assert snapshot in restore.stderr and "unchanged" in restore.stderr
    assert_left_as_it_was(existing)
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".hermes-restore")] == []


@pytest.mark.parametrize("layout", ["dir-on-small-disk", "data-dir-is-the-mount"])
def test_disk_full_while_staging_leaves_data_dir_as_it_was(
    data_dir: Path, tmp_path: Path, small_tmpfs: Path, layout: str
) -> None:
    target = file_target(tmp_path)
    (data_dir / "outputs" / "large.bin").write_bytes(os.urandom(3 * 1024 * 1024))
    create_ok(target, data_dir)
    dest = small_tmpfs / "data" if layout == "dir-on-small-disk" else small_tmpfs
    dest.mkdir(exist_ok=True)
    (dest / "memories").mkdir()
    (dest / "memories" / "MEMORY.md").write_text("old memory\n")
    before = tree_fingerprint(dest, skip_databases=False)

    result = run_cli("restore", "--target", target.url, "--data-dir", str(dest), "--force")
    assert result.returncode == 1
    assert "no space left on device" in result.stderr.lower() and str(dest) in result.stderr
    assert tree_fingerprint(dest, skip_databases=False) == before
    assert sorted(p.name for p in small_tmpfs.rglob(".hermes-restore*")) == []


def test_forced_restore_into_a_mount_point_stages_inside_it(data_dir: Path, tmp_path: Path) -> None:
    """D itself is a mount point (a PVC root): staging happens inside it, lost+found stays."""
    target = file_target(tmp_path)
    snapshot = create_ok(target, data_dir)
    mount_point = tmp_path / "pvc"
    mount_point.mkdir()
    subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=20m", "tmpfs", str(mount_point)], check=True
    )
    try:
        (mount_point / "lost+found").mkdir()
        (mount_point / "stale.txt").write_text("old")
        result = run_cli(
            "restore", "--target", target.url, "--data-dir", str(mount_point), "--force", "--json"
        )
        assert result.returncode == 0, result.stderr
        assert snapshot in result.stdout
        assert str(mount_point / ".hermes-restore-") in result.stderr  # staged inside D
        names = sorted(p.name for p in mount_point.iterdir())
        assert "stale.txt" not in names and "lost+found" in names
        assert not [n for n in names if n.startswith(".hermes-restore")]
        assert (mount_point / "SOUL.md").read_text() == "You are a careful agent.\n"
    finally:
        subprocess.run(["umount", "-l", str(mount_point)], check=True)


def test_if_empty_on_a_used_dir_does_not_need_the_target(tmp_path: Path) -> None:
    used = tmp_path / "data"
    used.mkdir()
    (used / "state.db").write_bytes(b"in use")
    result = run_cli(
        "restore",
        "--target",
        "s3://nowhere/agent",
        "--s3-endpoint",
        "http://127.0.0.1:9",
        "--data-dir",
        str(used),
        "--if-empty",
    )
    assert result.returncode == 0, result.stderr
    assert "nothing restored" in result.stdout
    assert (used / "state.db").read_bytes() == b"in use"


def test_full_scratch_space_fails_cleanly_without_a_snapshot(
    data_dir: Path, tmp_path: Path, small_tmpfs: Path
) -> None:
    from backup_testlib import make_database

    make_database(data_dir / "big.db", 8000, payload=400)  # about 4 MB: more than the 1 MiB scratch
    target = file_target(tmp_path)
    result = run_cli(
        "create",
        "--data-dir",
        str(data_dir),
        "--target",
        target.url,
        "--work-dir",
        str(small_tmpfs),
    )
    assert result.returncode == 1
    assert "No space left on device" in result.stderr or "disk is full" in result.stderr
    assert str(data_dir / "big.db") in result.stderr or str(small_tmpfs) in result.stderr
    assert listed(target) == []
    assert list(small_tmpfs.iterdir()) == []


HOLD_LOCK = """
import sys, time, apsw
conn = apsw.Connection(sys.argv[1])
for sql in ("PRAGMA journal_mode = DELETE", "CREATE TABLE t(x)", "INSERT INTO t VALUES (1)",
            "PRAGMA locking_mode = EXCLUSIVE", "BEGIN EXCLUSIVE", "INSERT INTO t VALUES (2)"):
    list(conn.execute(sql))
print("locked", flush=True)
time.sleep(120)
"""


def test_database_that_stays_locked_fails_after_bounded_retries(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD_LOCK, str(data / "journal.db")],
        stdout=subprocess.PIPE,
        text=True,
    )
    (tmp_path / "vol").mkdir()
    target = open_repository(f"file://{tmp_path / 'vol'}")
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
        with pytest.raises(RuntimeFailure, match=r"journal\.db: still locked after 2 attempts"):
            create_backup(data, target, db_attempts=2)
    finally:
        holder.kill()
        holder.wait()
    assert not list((tmp_path / "vol").glob("snapshots/*"))


def test_a_store_that_stops_answering_fails_the_backup_within_its_time_limit(
    data_dir: Path, tmp_path: Path
) -> None:
    """A bucket that freezes mid-upload (SIGSTOP: connections hang, nothing is refused): restic
    retries for up to 15 minutes and a backup Job was killed by its deadline with nothing
    recorded, so the backup-failed alert stayed silent (issue 30). With --timeout the run is
    stopped in time, the failure is recorded in the status file, and no snapshot appears."""
    add_many_files(data_dir, count=1500)
    status = tmp_path / "backup-status.json"
    with seaweedfs_server() as server:
        target = s3_target(server)
        process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "hermes_runtime",
                "backup",
                "create",
                "--data-dir",
                str(data_dir),
                "--target",
                target.url,
                "--timeout",
                "20",
                "--status-file",
                str(status),
            ],
            env={**os.environ, **target.env},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        wait_for_blobs(target, 1, process)
        server.container.get_wrapped_container().pause()
        try:
            _, stderr = process.communicate(timeout=180)  # 20 s + SIGINT's grace, not 15 min
        finally:
            server.container.get_wrapped_container().unpause()
        assert process.returncode == 1, stderr
        assert "did not finish within the time limit (--timeout)" in stderr, stderr
        assert target.url in stderr
        recorded = json.loads(status.read_text())
        assert recorded["last_attempt_ok"] is False and "--timeout" in recorded["error"], recorded
        assert listed(target) == []
