"""A git-sync-shaped plugin checkout (``D/.git-sync/NAME/current``), as git-sync lays it out.

Shared by the agent integration tests and the image tests.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

GIT_ENV = {
    "GIT_AUTHOR_NAME": "test",
    "GIT_AUTHOR_EMAIL": "test@example.invalid",
    "GIT_COMMITTER_NAME": "test",
    "GIT_COMMITTER_EMAIL": "test@example.invalid",
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_TERMINAL_PROMPT": "0",
}

PLUGIN_INIT = """
import os
from pathlib import Path

def register(ctx):
    with open(Path(os.environ["HERMES_HOME"]) / "plugin-loads.log", "a") as fh:
        fh.write(f"{NAME} {os.getpid()}\\n")
"""


def git(*args: str, cwd: Path) -> str:
    env = {**os.environ, **GIT_ENV, "HOME": str(cwd)}
    result = subprocess.run(["git", *args], cwd=cwd, env=env, capture_output=True, text=True)
    assert result.returncode == 0, f"git {' '.join(args)}: {result.stderr}"
    return result.stdout.strip()


def git_synced_plugin(data_dir: Path, name: str, scratch: Path) -> str:
    """Commit a Hermes plugin and lay it out as git-sync --root D/.git-sync/NAME --link current."""
    work = scratch / f"{name}-src"
    work.mkdir(parents=True)
    (work / "plugin.yaml").write_text(f"name: {name}\nversion: '1'\ndescription: test\n")
    (work / "__init__.py").write_text(f"NAME = {name!r}\n" + PLUGIN_INIT)
    git("init", "-q", "-b", "main", cwd=work)
    git("add", "-A", cwd=work)
    git("commit", "-qm", "plugin", cwd=work)
    root = data_dir / ".git-sync" / name
    root.mkdir(parents=True)
    git("init", "-q", cwd=root)
    git("fetch", "-q", str(work), "main", cwd=root)
    sha = git("rev-parse", "FETCH_HEAD", cwd=root)
    git("worktree", "add", "-q", "--detach", f".worktrees/{sha}", sha, cwd=root)
    os.symlink(f".worktrees/{sha}", root / "current")
    return sha


def git_sync_new_commit(data_dir: Path, name: str, scratch: Path, marker: str) -> str:
    """Commit a change to the plugin and swap ``current`` to it, as git-sync does."""
    work = scratch / f"{name}-src"
    (work / "VERSION").write_text(marker + "\n")
    git("add", "-A", cwd=work)
    git("commit", "-qm", marker, cwd=work)
    root = data_dir / ".git-sync" / name
    git("fetch", "-q", str(work), "main", cwd=root)
    sha = git("rev-parse", "FETCH_HEAD", cwd=root)
    git("worktree", "add", "-q", "--detach", f".worktrees/{sha}", sha, cwd=root)
    os.symlink(f".worktrees/{sha}", root / "current.tmp")
    os.replace(root / "current.tmp", root / "current")
    return sha
