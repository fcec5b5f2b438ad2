"""Fixtures for the plugin bootstrapper's integration tests (helpers in plugins_testlib)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from plugins_testlib import GitSyncLike, PluginRepo, git, plugin_files


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    path = tmp_path / "data"
    path.mkdir()
    return path


@pytest.fixture
def make_repo(tmp_path: Path) -> Callable[[str], PluginRepo]:
    def _make(name: str) -> PluginRepo:
        bare = tmp_path / "origin" / f"{name}.git"
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
