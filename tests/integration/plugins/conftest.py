"""Fixtures for the plugin bootstrapper's integration tests (helpers in plugins_testlib).

Bare repositories live in ``origin_root``: a folder of this test, or one the session's
git server container serves over HTTP (``git_server``) and SSH (``git_ssh_server``).
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from plugins_testlib import (
    GitServer,
    GitSshServer,
    GitSyncLike,
    PluginRepo,
    git,
    plugin_files,
    serve_git,
    serve_git_ssh,
)


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    path = tmp_path / "data"
    path.mkdir()
    return path


@pytest.fixture(scope="session")
def git_server_container(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GitServer]:
    """The git server image (the e2e tier's), serving a folder of the host read-only."""
    root = tmp_path_factory.mktemp("git-server")
    root.chmod(0o755)  # the image's user (UID 10001) reads it; pytest makes it 0700
    with serve_git(root) as server:
        yield server


@pytest.fixture(scope="session")
def git_ssh_server(
    git_server_container: GitServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[GitSshServer]:
    """The same image's sshd, serving the same folder over SSH (deploy key, known host)."""
    with serve_git_ssh(git_server_container.root, tmp_path_factory.mktemp("git-ssh")) as server:
        yield server


@pytest.fixture
def git_server(git_server_container: GitServer) -> GitServer:
    """The session's git server, with a folder of this test's own: ``url`` serves it."""
    folder = Path(tempfile.mkdtemp(dir=git_server_container.root))
    folder.chmod(0o755)
    return GitServer(f"{git_server_container.url}/{folder.name}", folder)


@pytest.fixture
def origin_root(tmp_path: Path) -> Path:
    """Where make_repo puts bare repositories (test_gitsync_standin: the git server's)."""
    return tmp_path / "origin"


@pytest.fixture
def make_repo(tmp_path: Path, origin_root: Path) -> Callable[[str], PluginRepo]:
    def _make(name: str) -> PluginRepo:
        bare = origin_root / f"{name}.git"
        work = tmp_path / "work" / name
        git("init", "-q", "--bare", "-b", "main", str(bare), cwd=tmp_path)
        git("clone", "-q", str(bare), str(work), cwd=tmp_path)
        git("checkout", "-q", "-b", "main", cwd=work)
        return PluginRepo(bare, work)

    return _make


@pytest.fixture
def synced_plugin(
    data_dir: Path, make_repo: Callable[[str], PluginRepo]
) -> Callable[..., GitSyncLike]:
    """A plugin repository committed and synced into ``D/.git-sync/<name>``."""

    def _make(name: str, version: str = "1", sub_path: str = "", sync: bool = True) -> GitSyncLike:
        repo = make_repo(name)
        prefix = f"{sub_path}/" if sub_path else ""
        repo.commit({f"{prefix}{k}": v for k, v in plugin_files(name, version).items()})
        syncer = GitSyncLike(repo, data_dir / ".git-sync" / name)
        if sync:
            syncer.sync()
        return syncer

    return _make
