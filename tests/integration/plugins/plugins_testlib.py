"""Real git repositories and a git-sync-shaped layout for the plugin bootstrapper tests.

``GitSyncLike`` reproduces what git-sync v4 leaves on disk, with real git:
``<root>`` is a git repository fetched from the bare origin, each synced
commit is a ``git worktree`` at ``<root>/.worktrees/<sha>``, and ``<root>/current``
is a relative symlink to it, swapped by rename (as git-sync does); the previous
worktree is deleted after the swap when a test asks (as git-sync does by default).
``serve_git`` serves bare repositories over smart HTTP from the git server image.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from support.containers import running, start_server
from support.git_ssh import CONFIG_DIR, SSHD_COMMAND, SSHD_CONFIG, keypair, known_hosts_line
from support.git_sync import GIT_ENV
from support.net import free_port
from testcontainers.core.wait_strategies import HttpWaitStrategy, PortWaitStrategy


def git(*args: str, cwd: Path | None = None) -> str:
    env = {**os.environ, **GIT_ENV, "HOME": str(cwd or Path.cwd())}
    result = subprocess.run(
        ["git", *args], cwd=cwd, env=env, capture_output=True, text=True, check=False
    )
    if result.returncode != 0:
        raise AssertionError(f"git {' '.join(args)} failed: {result.stderr}")
    return result.stdout.strip()


def plugin_files(name: str, version: str) -> dict[str, str]:
    """A Hermes plugin whose register() records that this version ran (once per load)."""
    init = textwrap.dedent(
        f'''
        import os
        from pathlib import Path

        VERSION = {version!r}

        def register(ctx):
            home = Path(os.environ["HERMES_HOME"])
            with open(home / "plugin-loads.log", "a") as fh:
                fh.write(f"{name} {{VERSION}} {{os.getpid()}}\\n")
        '''
    )
    manifest = f"name: {name}\nversion: {version!r}\ndescription: test plugin {name}\n"
    return {"plugin.yaml": manifest, "__init__.py": init}


@dataclass
class PluginRepo:
    """A bare origin plus a working clone to commit into."""

    bare: Path
    work: Path

    def commit(
        self, files: dict[str, str], message: str = "change", remove: tuple[str, ...] = ()
    ) -> str:
        for rel in remove:
            git("rm", "-rq", rel, cwd=self.work)
        for rel, text in files.items():
            path = self.work / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
        git("add", "-A", cwd=self.work)
        git("commit", "-qm", message, "--allow-empty", cwd=self.work)
        git("push", "-q", "origin", "HEAD:main", cwd=self.work)
        return git("rev-parse", "HEAD", cwd=self.work)

    def symlink(self, rel: str, target: str) -> None:
        path = self.work / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        os.symlink(target, path)


@dataclass
class GitSyncLike:
    """What git-sync --root ROOT --link current does, with real git commands."""

    repo: PluginRepo
    root: Path

    def sync(self, remove_old: bool = False) -> str:
        """Fetch origin's main, add a worktree for it, and swap ``current`` by rename.

        ``remove_old``: then delete the previous worktree, as git-sync v4 does right after
        a swap (its default ``--stale-worktree-timeout 0``).
        """
        if not (self.root / ".git").exists():
            self.root.mkdir(parents=True, exist_ok=True)
            git("init", "-q", cwd=self.root)
            git("remote", "add", "origin", str(self.repo.bare), cwd=self.root)
        git("fetch", "-q", "origin", "main", cwd=self.root)
        sha = git("rev-parse", "FETCH_HEAD", cwd=self.root)
        worktree = self.root / ".worktrees" / sha
        previous = self.current_sha()
        if not worktree.exists():
            git("worktree", "add", "-q", "--detach", f".worktrees/{sha}", sha, cwd=self.root)
        self.point_current_at(f".worktrees/{sha}")
        if remove_old and previous not in (None, sha):
            git("worktree", "remove", "--force", f".worktrees/{previous}", cwd=self.root)
        return sha

    def current_sha(self) -> str | None:
        """The commit ``current`` names now, or ``None`` before the first sync."""
        try:
            return os.readlink(self.root / "current").rsplit("/", 1)[-1]
        except FileNotFoundError:
            return None

    def point_current_at(self, target: str) -> None:
        temp = self.root / "current.tmp"
        if temp.is_symlink():
            temp.unlink()
        os.symlink(target, temp)
        os.replace(temp, self.root / "current")


@dataclass
class GitServer:
    """Smart HTTP (``git http-backend``) at ``url`` for the bare repositories in ``root``."""

    url: str
    root: Path


@contextmanager
def serve_git(root: Path) -> Iterator[GitServer]:
    """The git server image (ci/images/git-server) serving ``root``, mounted read-only.

    Pushes go to the bare repositories on the host's side (``PluginRepo.commit``), and a
    test may rename one away to make the server fail: the container only reads.
    """
    port = free_port()
    command = ["--root", "/srv/git", "--host", "127.0.0.1", "--port", str(port)]
    ready = HttpWaitStrategy(port, "/healthz").for_status_code(200)
    container = start_server(
        "git-server", command, ready, read_only_mounts=[(str(root), "/srv/git")]
    )
    with running(container):
        yield GitServer(f"http://127.0.0.1:{port}", root)


@dataclass
class GitSshServer:
    """sshd of the git server image: ``url_of(path)`` for a bare repository under ``root``,
    fetched with ``key`` and checked against ``known_hosts``."""

    port: int
    root: Path
    key: Path
    known_hosts: Path

    def url_of(self, bare: Path) -> str:
        return f"ssh://git@127.0.0.1:{self.port}/srv/git/{bare.relative_to(self.root)}"


@contextmanager
def serve_git_ssh(root: Path, keys: Path) -> Iterator[GitSshServer]:
    """The git server image's sshd (as tests/e2e/charts/ci-backends runs it) serving ``root``.

    A host key and a deploy key are made in ``keys``; the server's files go in before it
    starts, as the chart mounts them from a Secret.
    """
    port = free_port()
    host, deploy = keypair(keys, "host"), keypair(keys, "deploy")
    files = {
        f"{CONFIG_DIR}/sshd_config": SSHD_CONFIG.format(port=port).encode(),
        f"{CONFIG_DIR}/host_key": host.read_bytes(),  # root-owned inside, as a Secret volume
        f"{CONFIG_DIR}/authorized_keys": deploy.with_suffix(".pub").read_bytes(),
    }
    container = start_server(
        "git-server",
        SSHD_COMMAND[1:],
        PortWaitStrategy(port),
        read_only_mounts=[(str(root), "/srv/git")],
        read_only=False,
        files=files,
        entrypoint=SSHD_COMMAND[0],
    )
    known_hosts = keys / "known_hosts"
    known_hosts.write_text(known_hosts_line(port, host))
    with running(container):
        yield GitSshServer(port, root, deploy, known_hosts)


def write_spec(path: Path, plugins: list[dict[str, object]]) -> Path:
    """Replace the spec in one step, as the kubelet swaps a mounted ConfigMap's files.

    A write in place could be seen half done (an empty file) by a watcher polling it."""
    staged = path.with_name(path.name + ".new")
    staged.write_text(json.dumps({"plugins": plugins}))
    os.replace(staged, path)
    return path


DISCOVER_SNIPPET = """
import json
from hermes_cli.plugins import get_plugin_manager
manager = get_plugin_manager()
manager.discover_and_load()
print(json.dumps([p for p in manager.list_plugins() if p["source"] == "user"]))
"""


def hermes_discover(data_dir: Path) -> list[dict[str, object]]:
    """Run Hermes 0.19.0's own plugin discovery in a fresh process with HERMES_HOME=D."""
    env = {**os.environ, "HERMES_HOME": str(data_dir)}
    result = subprocess.run(
        [sys.executable, "-c", DISCOVER_SNIPPET],
        capture_output=True,
        text=True,
        check=False,
        env=env,
        cwd=data_dir,
    )
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])


API_KEY = "plugins-test-key-0123456789abcdef"


def write_hermes_config(data_dir: Path, base_url: str = "http://127.0.0.1:9/v1") -> None:
    """A minimal config; the provider is the fake LLM where a test chats, unused elsewhere."""
    (data_dir / "config.yaml").write_text(
        "# written by the test; plugins.enabled is managed by hermes-runtime\n"
        f"model:\n  provider: custom\n  base_url: {base_url}\n"
        "  default: fake-model\n  api_key: x\n"
    )


class SupervisedGateway:
    """A real ``hermes gateway run --external-supervisor`` restarted when it exits 75.

    This is what the agent entrypoint does in the pod; the test keeps its own
    copy so the bootstrapper is tested against Hermes, not against our entrypoint.
    """

    def __init__(self, data_dir: Path, log_path: Path) -> None:
        import threading

        self.data_dir = data_dir
        self.port = free_port()
        self.log_path = log_path
        self.process: subprocess.Popen[bytes] | None = None
        self.exit_codes: list[int] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._supervise, daemon=True)

    def env(self) -> dict[str, str]:
        return {
            **os.environ,
            "HERMES_HOME": str(self.data_dir),
            "API_SERVER_ENABLED": "true",
            "API_SERVER_KEY": API_KEY,
            "API_SERVER_HOST": "127.0.0.1",
            "API_SERVER_PORT": str(self.port),
        }

    def start(self) -> SupervisedGateway:
        self._thread.start()
        return self

    def _supervise(self) -> None:
        hermes = str(Path(sys.executable).with_name("hermes"))
        with self.log_path.open("ab") as log:
            while not self._stop.is_set():
                self.process = subprocess.Popen(
                    [hermes, "gateway", "run", "--external-supervisor"],
                    env=self.env(),
                    cwd=self.data_dir,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                )
                code = self.process.wait()
                self.exit_codes.append(code)
                if code != 75:
                    return

    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    def chat(self, text: str, timeout: float = 120) -> tuple[int, str]:
        """One OpenAI-style chat turn through the gateway's API server."""
        import urllib.error
        import urllib.request

        body = json.dumps(
            {"model": "hermes-agent", "messages": [{"role": "user", "content": text}]}
        )
        request = urllib.request.Request(
            f"http://127.0.0.1:{self.port}/v1/chat/completions",
            data=body.encode(),
            headers={"Content-Type": "application/json", "Authorization": f"Bearer {API_KEY}"},
            method="POST",
        )
        try:
            with urllib.request.urlopen(request, timeout=timeout) as response:
                payload = json.load(response)
                return int(response.status), str(payload["choices"][0]["message"]["content"])
        except urllib.error.HTTPError as exc:
            return int(exc.code), exc.read().decode(errors="replace")

    def healthy(self) -> bool:
        import urllib.request

        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/health", timeout=1) as r:
                return bool(r.status == 200)
        except OSError:
            return False

    def stop(self) -> None:
        import signal

        self._stop.set()
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self._thread.join(timeout=30)


def read_loads(data_dir: Path) -> list[tuple[str, str, int]]:
    path = data_dir / "plugin-loads.log"
    if not path.exists():
        return []
    rows = []
    for line in path.read_text().splitlines():
        name, version, pid = line.split()
        rows.append((name, version, int(pid)))
    return rows
