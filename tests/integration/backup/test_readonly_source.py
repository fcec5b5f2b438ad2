"""``backup create`` from a data volume mounted read-only, as the chart's backup pods mount it.

SQLite reads a WAL database from a read-only mount only through an existing ``-shm``, that
is while its owner has it open; a database no process has open is read as it lies and kept
only if it did not change meanwhile; a ``-wal`` with transactions and no ``-shm`` (an owner
that crashed) cannot be read without recovery, which writes: the backup fails naming it.

As root (CI) ``create`` runs in a private mount namespace where the data dir is bind-mounted
read-only, so nothing it does can write there.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from backup_testlib import BackupTarget, file_target, make_database, rows, run_cli

from hermes_runtime.common.sqlite import connect


def create_read_only(target: BackupTarget, data: Path) -> subprocess.CompletedProcess[str]:
    """``backup create --json`` while ``data`` is a read-only bind mount (root only)."""
    create = ["backup", "create", "--data-dir", str(data), "--target", target.url, "--json"]
    cli = shlex.join([sys.executable, "-m", "hermes_runtime", *create])
    folder = shlex.quote(str(data))
    script = f"mount --bind {folder} {folder} && mount -o remount,bind,ro {folder} && exec {cli}"
    argv = ["unshare", "--mount", "--propagation", "private", "sh", "-c", script]
    env = {**os.environ, **target.env}
    return subprocess.run(argv, capture_output=True, text=True, timeout=300, env=env, check=False)


@pytest.fixture(autouse=True)
def as_root() -> None:
    assert os.geteuid() == 0, "these tests bind-mount the data dir read-only: run them as root"


def test_open_closed_and_journal_databases_back_up_from_a_read_only_volume(
    tmp_path: Path,
) -> None:
    data = tmp_path / "data"
    make_database(data / "idle.db", 30)  # WAL, closed: no -wal, no -shm left
    make_database(data / "journal.db", 20)
    journal = connect(data / "journal.db", wal=False)
    journal.execute("PRAGMA journal_mode=DELETE")
    journal.close()
    make_database(data / "live.db", 40)
    holder = connect(data / "live.db")  # its owner holds it open: -wal and -shm exist
    with holder:
        holder.execute("INSERT INTO messages(body) VALUES ('uncheckpointed')")
    assert (data / "live.db-shm").exists() and not (data / "idle.db-shm").exists()
    target = file_target(tmp_path)
    try:
        created = create_read_only(target, data)
    finally:
        holder.close()
    assert created.returncode == 0, created.stderr
    restored = tmp_path / "restored"
    done = run_cli("restore", "--target", target.url, "--data-dir", str(restored), env=target.env)
    assert done.returncode == 0, done.stderr
    for name, count in (("idle.db", 30), ("journal.db", 20), ("live.db", 41)):
        assert rows(restored / name, "SELECT count(*) FROM messages") == [(count,)], name


def test_a_wal_no_process_has_open_fails_the_backup_naming_the_database(tmp_path: Path) -> None:
    data = tmp_path / "data"
    make_database(data / "crashed.db", 10)
    owner = connect(data / "crashed.db")
    owner.execute("PRAGMA wal_autocheckpoint=0")
    with owner:
        owner.execute("INSERT INTO messages(body) VALUES ('only in the wal')")
    kept_wal = tmp_path / "kept-wal"
    shutil.copy(data / "crashed.db-wal", kept_wal)  # the -wal as a killed owner leaves it
    owner.close()
    shutil.copy(kept_wal, data / "crashed.db-wal")
    (data / "crashed.db-shm").unlink(missing_ok=True)
    target = file_target(tmp_path)
    created = create_read_only(target, data)
    assert created.returncode == 1, created.stdout
    assert f"database {data / 'crashed.db'}: its -wal holds transactions" in created.stderr
    assert "backup.dataVolumeReadOnly=false" in created.stderr
    listed = run_cli("list", "--target", target.url, "--json", env=target.env)
    assert listed.returncode == 0 and listed.stdout.strip() in ("", "[]"), listed.stdout
