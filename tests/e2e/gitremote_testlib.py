"""The in-cluster Git server (the `git-server` Service of the backends chart) from this host:
clones in a temporary folder, pushed through a port-forward. Shared by the plugin scenarios."""

from __future__ import annotations

import contextlib
import os
import subprocess
import tempfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from support.git_sync import GIT_ENV

from . import kube


@dataclass
class GitRemote:
    """Clones of the in-cluster repositories; ``sub_paths``: the folder of a repository its
    plugin lives in (a chart's ``subPath``), the repository's root for names not in it."""

    base: str
    work: Path
    sub_paths: Mapping[str, str] = field(default_factory=dict)

    def git(self, *args: str, cwd: Path | None = None) -> str:
        env = {**os.environ, **GIT_ENV, "HOME": str(self.work)}
        done = subprocess.run(
            ["git", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=120
        )
        if done.returncode != 0:
            raise AssertionError(f"git {' '.join(args)} failed: {done.stderr}")
        return done.stdout.strip()

    def clone(self, name: str) -> Path:
        path = self.work / name
        if not path.exists():
            self.git("clone", "-q", f"{self.base}/{name}.git", str(path))
        else:
            self.git("pull", "-q", "--ff-only", cwd=path)
        return path

    def head(self, name: str) -> str:
        return self.git("ls-remote", f"{self.base}/{name}.git", "refs/heads/main").split()[0]

    def push(self, name: str, files: dict[str, str], symlinks: dict[str, str] | None = None) -> str:
        """Commit `files` (and symlinks) under the plugin's folder and push; return the sha."""
        repo = self.clone(name)
        folder = repo / self.sub_paths[name] if self.sub_paths.get(name) else repo
        for rel, text in files.items():
            (folder / rel).parent.mkdir(parents=True, exist_ok=True)
            (folder / rel).write_text(text)
        for rel, target in (symlinks or {}).items():
            with contextlib.suppress(FileNotFoundError):
                (folder / rel).unlink()
            os.symlink(target, folder / rel)
        self.git("add", "-A", cwd=repo)
        self.git("commit", "-qm", f"e2e change to {name}", cwd=repo)
        self.git("push", "-q", "origin", "HEAD:main", cwd=repo)
        return self.git("rev-parse", "HEAD", cwd=repo)


@contextlib.contextmanager
def git_remote(
    cluster: kube.Cluster, namespace: str, sub_paths: Mapping[str, str] | None = None
) -> Iterator[GitRemote]:
    with (
        kube.port_forward(cluster, namespace, "svc/git-server", 8080) as port,
        tempfile.TemporaryDirectory(prefix="e2e-git-") as work,
    ):
        yield GitRemote(f"http://127.0.0.1:{port}", Path(work), sub_paths or {})
