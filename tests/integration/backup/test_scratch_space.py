"""Where database snapshots are staged: /tmp (TMPDIR) by default, or --work-dir.

The chart's backup pod gets a scratch volume sized for the largest database
(`--work-dir /scratch`) because its /tmp is a small emptyDir: this is that
situation on a real filesystem, a 1 MiB tmpfs as TMPDIR and a 4 MB database.
"""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path

from backup_testlib import BackupTarget, create_json, make_database, run_cli

from hermes_runtime.common.sqlite import connect


def test_a_database_larger_than_tmp_backs_up_through_work_dir(
    target: BackupTarget, data_dir: Path, tmp_path: Path, small_tmpfs: Path
) -> None:
    make_database(data_dir / "big.db", 8000, payload=400)  # about 4 MB: more than 1 MiB
    env = {**target.env, "TMPDIR": str(small_tmpfs)}
    base = ("create", "--data-dir", str(data_dir), "--target", target.url, "--json")

    too_small = run_cli(*base, env=env)
    assert too_small.returncode == 1, "TMPDIR is where snapshots go without --work-dir"
    assert "No space left on device" in too_small.stderr or "disk is full" in too_small.stderr
    assert list(small_tmpfs.iterdir()) == []

    scratch = tmp_path / "scratch"
    scratch.mkdir()
    done = run_cli(*base, "--work-dir", str(scratch), env=env)
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    assert summary["databases"]["big.db"] == {"messages": 8000}
    assert list(scratch.iterdir()) == [], "the scratch folder is emptied after the run"
    verified = run_cli("verify", "--target", target.url, env=target.env)
    assert verified.returncode == 0, verified.stderr


def test_restic_pack_files_go_to_work_dir_not_tmpdir(
    target: BackupTarget, data_dir: Path, tmp_path: Path, small_tmpfs: Path
) -> None:
    """restic writes each pack (up to 16 MiB) to a temporary file before uploading it.

    An incompressible 4 MiB database makes packs larger than the 1 MiB TMPDIR, as in the
    chart's backup pod, whose /tmp is a small emptyDir: with --work-dir they go there too.
    """
    db = connect(data_dir / "random.db")
    db.execute("CREATE TABLE blobs(id INTEGER PRIMARY KEY, body BLOB)")
    with db:
        db.executemany(
            "INSERT INTO blobs(body) VALUES (?)", ((os.urandom(1 << 16),) for _ in range(64))
        )
    db.close()
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    small_tmp = dataclasses.replace(target, env={**target.env, "TMPDIR": str(small_tmpfs)})
    summary = create_json(small_tmp, data_dir, "--work-dir", str(scratch))
    assert summary["databases"]["random.db"] == {"blobs": 64}
    assert summary["bytes_uploaded"] > 4 << 20, "the random rows cannot be compressed"
    assert list(small_tmpfs.iterdir()) == []
