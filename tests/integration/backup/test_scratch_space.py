"""Where database snapshots are staged: /tmp (TMPDIR) by default, or --work-dir.

The chart's backup pod gets a scratch volume sized for the largest database
(`--work-dir /scratch`) because its /tmp is a small emptyDir: this is that
situation on a real filesystem, a 1 MiB tmpfs as TMPDIR and a 4 MB database.
"""

from __future__ import annotations

import json
from pathlib import Path

from backup_testlib import BackupTarget, make_database, run_cli


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
