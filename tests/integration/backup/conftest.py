"""Fixtures for backup integration tests: a real SeaweedFS, Hermes-like data dirs, the CLI.

Tests that take ``target`` run against BOTH kinds of target: a folder
(``file://``) and a bucket on a real S3-compatible server (SeaweedFS, the image the
e2e tier runs, started here through testcontainers once per session).
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from backup_testlib import PASSWORD_ENV, BackupTarget, file_target, make_database, s3_target
from support.restic import pinned_restic
from support.seaweedfs import SeaweedServer, seaweedfs_server


@pytest.fixture(scope="session", autouse=True)
def restic_binary() -> str:
    """The pinned restic (v0.19.1, tests/support/restic.py builds it on demand), for every run."""
    binary = str(pinned_restic())
    os.environ["HERMES_RUNTIME_RESTIC"] = binary  # CLI subprocesses inherit it
    return binary


@pytest.fixture(autouse=True)
def restic_password(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every CLI run and library call here gets the repository password from restic's variable."""
    for name, value in PASSWORD_ENV.items():
        monkeypatch.setenv(name, value)


@pytest.fixture(scope="session")
def seaweed() -> Iterator[SeaweedServer]:
    """One SeaweedFS container for the session; each test gets its own bucket (s3_target)."""
    with seaweedfs_server() as server:
        yield server


@pytest.fixture(params=["file", "s3"])
def target(request: pytest.FixtureRequest, tmp_path: Path) -> BackupTarget:
    if request.param == "file":
        return file_target(tmp_path)
    return s3_target(request.getfixturevalue("seaweed"))


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    """A small Hermes-like HERMES_HOME: databases, memory files, secrets, git-sync, caches."""
    d = tmp_path / "data"
    d.mkdir()
    make_database(d / "state.db", 500)
    make_database(d / "lcm.db", 300)
    (d / "config.yaml").write_text("model: {provider: custom}\n")
    (d / "SOUL.md").write_text("You are a careful agent.\n")
    os.chmod(d / "SOUL.md", 0o600)
    (d / "memories").mkdir()
    (d / "memories" / "MEMORY.md").write_text("- the user likes tea\n")
    (d / "skills" / "tea").mkdir(parents=True)
    (d / "skills" / "tea" / "SKILL.md").write_text("# brew tea\n")
    os.chmod(d / "memories", 0o700)  # modes of top-level and nested folders come back
    os.chmod(d / "skills" / "tea", 0o750)
    (d / "outputs").mkdir()
    for i in range(20):
        (d / "outputs" / f"result-{i}.txt").write_bytes(os.urandom(2000) * 3)
    (d / "outputs" / "empty.txt").write_bytes(b"")
    (d / "sessions").mkdir()  # an empty folder must come back too
    (d / ".env").write_text("OPENAI_API_KEY=sk-live-secret\n")
    (d / "auth.json").write_text('{"token": "oauth-secret"}\n')
    (d / ".git-sync" / "weather").mkdir(parents=True)
    (d / ".git-sync" / "weather" / "plugin.yaml").write_text("name: weather\n")
    (d / "plugins").mkdir()
    (d / "plugins" / "weather").symlink_to("../.git-sync/weather")
    (d / "cache" / "images").mkdir(parents=True)
    (d / "cache" / "images" / "a.png").write_bytes(b"\x89PNG" * 100)
    return d


@pytest.fixture
def small_tmpfs(tmp_path: Path) -> Iterator[Path]:
    """A 1 MiB tmpfs: a real ENOSPC, not a simulated one (needs root, as in CI)."""
    mount_point = tmp_path / "small"
    mount_point.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mount_point)], check=True)
    try:
        yield mount_point
    finally:
        subprocess.run(["umount", "-l", str(mount_point)], check=True)
