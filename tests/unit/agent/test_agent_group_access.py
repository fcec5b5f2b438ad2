"""`agent prepare` shares the data dir with the pod's group: what it owns, nothing else.

The roles of the pod (replicate, backup, restore) run as other UIDs and reach the agent's
files through the pod's group only, so a volume from before (files 0644/0600, folders
0755/0700) must gain the group's bits at the agent's start, while what is private on
purpose, what another UID owns, plugin trees and anything behind a link stay as they are.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from hermes_runtime.cli import main


def mode(path: Path) -> int:
    return stat.S_IMODE(path.lstat().st_mode)


def make(path: Path, bits: int, text: str = "x") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(bits)
    return path


@pytest.fixture
def old_volume(tmp_path: Path) -> Path:
    """A data dir as an agent that ran under umask 022 and one UID for every role left it."""
    data = tmp_path / "data"
    make(data / "state.db", 0o644)
    make(data / "sessions" / "s1.json", 0o600)
    (data / "sessions").chmod(0o700)
    make(data / ".hermes-runtime" / "seed.json", 0o644)
    (data / ".hermes-runtime").chmod(0o750)
    make(data / ".hermes-runtime" / "idempotency.db", 0o600)
    make(data / ".env", 0o600)
    make(data / ".git-sync" / "hello" / "plugin.py", 0o644)
    make(tmp_path / "outside" / "secret", 0o600)
    (data / "evil").symlink_to(tmp_path / "outside" / "secret")
    os.chown(make(data / "restored.db", 0o644), 10004, 10000)  # restore's UID
    return data


def test_prepare_widens_what_the_agent_owns_and_nothing_else(
    old_volume: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = old_volume
    previous = os.umask(0o022)  # what the container starts with
    try:
        assert main(["agent", "prepare", "--data-dir", str(data), "--json"]) == 0
    finally:
        os.umask(previous)
    assert mode(data / "state.db") == 0o664
    assert mode(data / "sessions") == 0o770 and mode(data / "sessions" / "s1.json") == 0o660
    assert mode(data / ".hermes-runtime") == 0o770
    assert mode(data / ".hermes-runtime" / "seed.json") == 0o664
    assert mode(data / "home") == 0o770  # made by prepare, under the shared umask
    # private on purpose (left out of backups), another UID's, a plugin tree, behind a link
    assert mode(data / ".hermes-runtime" / "idempotency.db") == 0o600
    assert mode(data / ".env") == 0o600
    assert mode(data / "restored.db") == 0o644
    assert mode(data / ".git-sync" / "hello" / "plugin.py") == 0o644
    assert mode(data / ".git-sync" / "hello") == 0o755
    assert mode(tmp_path / "outside" / "secret") == 0o600
    err = capsys.readouterr().err
    shared = [json.loads(x) for x in err.splitlines() if '"agent.data_dir.shared"' in x]
    assert len(shared) == 1, err
    assert shared[0]["not_owned"] == 1 and shared[0]["widened"] >= 6


def test_a_second_start_changes_nothing(
    old_volume: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["agent", "prepare", "--data-dir", str(old_volume)]) == 0
    capsys.readouterr()
    assert main(["agent", "prepare", "--data-dir", str(old_volume)]) == 0
    err = capsys.readouterr().err
    shared = [json.loads(x) for x in err.splitlines() if '"agent.data_dir.shared"' in x]
    assert shared[0]["widened"] == 0, err
