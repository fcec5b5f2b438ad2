"""restic specifics: the password is required, and the repository is readable by restic alone."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from backup_testlib import BackupTarget, rows

from hermes_runtime.backup.restic import open_repository, restic_binary
from hermes_runtime.backup.restic_engine import (
    MANIFEST_RELPATH,
    create_restic_backup,
)
from hermes_runtime.common.errors import RuntimeFailure

PASSWORD = {"RESTIC_PASSWORD": "correct horse battery staple"}


def test_missing_password_is_a_clear_error(target: BackupTarget) -> None:
    environ = {k: v for k, v in {**os.environ, **target.env}.items() if "RESTIC" not in k}
    with pytest.raises(RuntimeFailure, match="RESTIC_PASSWORD"):
        open_repository(target.url, environ=environ)
    result = subprocess.run(
        [sys.executable, "-m", "hermes_runtime", "backup", "list", "--target", target.url],
        env=environ,
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 1
    assert target.url in result.stderr and "RESTIC_PASSWORD_FILE" in result.stderr
    assert "Traceback" not in result.stderr


def test_plain_restic_restores_the_data_dir(data_dir: Path, tmp_path: Path) -> None:
    """The runbook's way without our CLI: `restic restore latest --target DIR`."""
    root = tmp_path / "repo"
    root.mkdir()
    repo = open_repository(f"file://{root}", environ={**os.environ, **PASSWORD})
    create_restic_backup(data_dir, repo, work_dir=tmp_path)
    out = tmp_path / "plain"
    subprocess.run(
        [restic_binary(), "-r", str(root), "restore", "latest", "--target", str(out)],
        env={**os.environ, **PASSWORD},
        check=True,
        capture_output=True,
    )
    assert (out / "memories" / "MEMORY.md").read_text() == "- the user likes tea\n"
    assert rows(out / "lcm.db", "PRAGMA integrity_check") == [("ok",)]
    assert (out / MANIFEST_RELPATH).exists()
