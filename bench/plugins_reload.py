"""Benchmark: relink time, and time from a new plugin commit to the new code running in Hermes.

Usage:
    .venv/bin/python bench/plugins_reload.py [--plugins 1,10,50] [--reloads 3]
        [--interval 1.0] [--git-sync PATH] [--json]

Relink: ``link_plugins`` over N plugins, first run (creates links and
config.yaml) and steady state (nothing to do), median of 5.

Reload: a real ``hermes gateway run --external-supervisor`` (restarted on exit
75, as the agent entrypoint does) with the plugin's register() appending its
version to a log. The clock starts when ``current`` is swapped to a new commit
(git-sync-like swap with real git) and stops when the new version's
register() has run in the new gateway process; then /health answering again.
With ``--git-sync PATH`` the real git-sync binary runs with ``--period 1s``
and the clock starts at ``git push`` instead (so it includes git-sync's poll).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

import runinfo

from hermes_runtime.agent import GatewayRestarter
from hermes_runtime.plugins import LinkReport, link_plugins, watch_links

API_KEY = "bench-key-0123456789abcdef0123456789"
GIT_ENV = {
    "GIT_AUTHOR_NAME": "bench",
    "GIT_AUTHOR_EMAIL": "bench@example.invalid",
    "GIT_COMMITTER_NAME": "bench",
    "GIT_COMMITTER_EMAIL": "bench@example.invalid",
    "GIT_CONFIG_NOSYSTEM": "1",
}


def git(*args: str, cwd: Path) -> str:
    env = {**os.environ, **GIT_ENV, "HOME": str(cwd)}
    out = subprocess.run(["git", *args], cwd=cwd, env=env, capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError(f"git {' '.join(args)}: {out.stderr}")
    return out.stdout.strip()


def plugin_files(name: str, version: str) -> dict[str, str]:
    init = (
        "import os, time\n"
        f"VERSION = {version!r}\n"
        "def register(ctx):\n"
        "    with open(os.path.join(os.environ['HERMES_HOME'], 'plugin-loads.log'), 'a') as fh:\n"
        f"        fh.write(f'{name} {{VERSION}} {{os.getpid()}} {{time.time()}}\\n')\n"
    )
    return {"plugin.yaml": f"name: {name}\nversion: {version!r}\n", "__init__.py": init}


class Repo:
    """A bare origin, a working clone, and a git-sync-shaped root under D/.git-sync/<name>."""

    def __init__(self, base: Path, data_dir: Path, name: str) -> None:
        self.name = name
        self.bare = base / "origin" / f"{name}.git"
        self.work = base / "work" / name
        self.root = data_dir / ".git-sync" / name
        self.bare.parent.mkdir(parents=True, exist_ok=True)
        git("init", "-q", "--bare", "-b", "main", str(self.bare), cwd=base)
        git("clone", "-q", str(self.bare), str(self.work), cwd=base)
        git("checkout", "-q", "-b", "main", cwd=self.work)

    def commit(self, version: str) -> str:
        for rel, text in plugin_files(self.name, version).items():
            (self.work / rel).write_text(text)
        git("add", "-A", cwd=self.work)
        git("commit", "-qm", f"v{version}", cwd=self.work)
        git("push", "-q", "origin", "HEAD:main", cwd=self.work)
        return git("rev-parse", "HEAD", cwd=self.work)

    def sync_like_git_sync(self) -> None:
        """Fetch + worktree add (the slow part), then only the swap of ``current``."""
        if not (self.root / ".git").exists():
            self.root.mkdir(parents=True)
            git("init", "-q", cwd=self.root)
            git("remote", "add", "origin", str(self.bare), cwd=self.root)
        git("fetch", "-q", "origin", "main", cwd=self.root)
        sha = git("rev-parse", "FETCH_HEAD", cwd=self.root)
        git("worktree", "add", "-q", "--detach", f".worktrees/{sha}", sha, cwd=self.root)
        tmp = self.root / "current.tmp"
        os.symlink(f".worktrees/{sha}", tmp)
        os.replace(tmp, self.root / "current")


def write_spec(path: Path, names: list[str]) -> Path:
    path.write_text(json.dumps({"plugins": [{"name": n} for n in names]}))
    return path


def bench_relink(counts: list[int]) -> list[dict[str, Any]]:
    rows = []
    for count in counts:
        cold, warm = [], []
        for _ in range(5):
            with tempfile.TemporaryDirectory() as tmp:
                base = Path(tmp)
                data = base / "data"
                data.mkdir()
                names = [f"p{i}" for i in range(count)]
                for name in names:
                    repo = Repo(base, data, name)
                    repo.commit("1")
                    repo.sync_like_git_sync()
                spec = write_spec(base / "plugins.yaml", names)
                start = time.perf_counter()
                assert link_plugins(data, spec).ok
                cold.append(time.perf_counter() - start)
                start = time.perf_counter()
                report = link_plugins(data, spec)
                warm.append(time.perf_counter() - start)
                assert report.ok and not report.changed
        rows.append(
            {
                "plugins": count,
                "first_link_ms": round(statistics.median(cold) * 1000, 1),
                "steady_relink_ms": round(statistics.median(warm) * 1000, 1),
            }
        )
    return rows


class Gateway:
    """``hermes gateway run --external-supervisor``, restarted on exit 75."""

    def __init__(self, data_dir: Path) -> None:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            self.port = sock.getsockname()[1]
        self.data_dir = data_dir
        self.proc: subprocess.Popen[bytes] | None = None
        self.exits: list[tuple[int, float]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._log = (data_dir.parent / "gateway.log").open("ab")

    def _run(self) -> None:
        env = {
            **os.environ,
            "HERMES_HOME": str(self.data_dir),
            "API_SERVER_ENABLED": "true",
            "API_SERVER_KEY": API_KEY,
            "API_SERVER_HOST": "127.0.0.1",
            "API_SERVER_PORT": str(self.port),
        }
        hermes = str(Path(sys.executable).with_name("hermes"))
        while not self._stop.is_set():
            self.proc = subprocess.Popen(
                [hermes, "gateway", "run", "--external-supervisor"],
                env=env,
                cwd=self.data_dir,
                stdout=self._log,
                stderr=subprocess.STDOUT,
            )
            code = self.proc.wait()
            self.exits.append((code, time.time()))
            if code != 75:
                return

    def start(self) -> Gateway:
        self._thread.start()
        return self

    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def healthy(self) -> bool:
        try:
            url = f"http://127.0.0.1:{self.port}/health"
            with urllib.request.urlopen(url, timeout=1) as response:
                return bool(response.status == 200)
        except OSError:
            return False

    def stop(self) -> None:
        self._stop.set()
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            self.proc.wait(timeout=60)
        self._thread.join(timeout=60)


def loads(data_dir: Path) -> list[tuple[str, float]]:
    path = data_dir / "plugin-loads.log"
    if not path.exists():
        return []
    return [(line.split()[1], float(line.split()[3])) for line in path.read_text().splitlines()]


def wait_for(predicate: Any, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError("benchmark step timed out")
        time.sleep(0.02)


def bench_reload(reloads: int, interval: float, git_sync: str | None) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        data = base / "data"
        data.mkdir()
        (data / "config.yaml").write_text(
            "model:\n  provider: custom\n  base_url: http://127.0.0.1:9/v1\n"
            "  default: fake\n  api_key: x\n"
        )
        repo = Repo(base, data, "weather")
        repo.commit("0")
        syncer = start_git_sync(git_sync, repo) if git_sync else None
        if syncer is None:
            repo.sync_like_git_sync()
        spec = write_spec(base / "plugins.yaml", ["weather"])
        baseline = link_plugins(data, spec, wait_seconds=60)
        assert baseline.ok, baseline.to_dict()
        gateway = Gateway(data).start()
        signalled: list[float] = []
        restarter = GatewayRestarter(data, pid=gateway.pid)

        def on_change(report: LinkReport) -> None:
            signalled.append(time.time())
            restarter(report)

        stop = threading.Event()
        watcher = threading.Thread(
            target=watch_links,
            args=(data, spec, on_change, stop),
            kwargs={"interval": interval, "baseline": baseline},
            daemon=True,
        )
        samples: list[dict[str, float]] = []
        try:
            wait_for(lambda: gateway.healthy() and loads(data))
            watcher.start()
            for number in range(1, reloads + 1):
                version = str(number)
                if syncer is None:
                    repo.commit(version)
                    started = time.time()
                    repo.sync_like_git_sync()
                else:
                    started = time.time()
                    repo.commit(version)
                wait_for(lambda v=version: any(x == v for x, _ in loads(data)))  # type: ignore[misc]
                ran_at = next(t for x, t in loads(data) if x == version)
                wait_for(gateway.healthy)
                healthy_at = time.time()
                exit_at = gateway.exits[-1][1]
                samples.append(
                    {
                        "detect_s": signalled[-1] - started,
                        "quiesce_exit_s": exit_at - signalled[-1],
                        "new_code_s": ran_at - started,
                        "healthy_s": healthy_at - started,
                    }
                )
        finally:
            stop.set()
            gateway.stop()
            if syncer is not None:
                syncer.terminate()
                syncer.wait(timeout=10)
        return {
            "mode": "real git-sync --period 1s (clock from git push)"
            if git_sync
            else "git-sync-like swap (clock from swap of current)",
            "watch_interval_s": interval,
            "reloads": reloads,
            **{
                key: round(statistics.median(s[key] for s in samples), 2)
                for key in ("detect_s", "quiesce_exit_s", "new_code_s", "healthy_s")
            },
            "max_new_code_s": round(max(s["new_code_s"] for s in samples), 2),
        }


def start_git_sync(binary: str, repo: Repo) -> subprocess.Popen[bytes]:
    repo.root.parent.mkdir(parents=True, exist_ok=True)
    return subprocess.Popen(
        [
            binary,
            f"--repo=file://{repo.bare}",
            "--ref=main",
            f"--root={repo.root}",
            "--link=current",
            "--period=1s",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env={**os.environ, "HOME": str(repo.root.parent)},
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--plugins", default="1,10,50")
    parser.add_argument("--reloads", type=int, default=3)
    parser.add_argument("--interval", type=float, default=1.0)
    parser.add_argument("--git-sync", default=None, metavar="PATH")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    runinfo.announce()
    counts = [int(part) for part in args.plugins.split(",") if part]
    result = {
        "relink": bench_relink(counts) if counts else [],
        "reload": bench_reload(args.reloads, args.interval, args.git_sync),
    }
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    for row in result["relink"]:
        print(
            f"relink  {row['plugins']:3d} plugin(s): first {row['first_link_ms']} ms, "
            f"steady {row['steady_relink_ms']} ms"
        )
    reload = result["reload"]
    print(
        f"reload  {reload['mode']}, watch interval {reload['watch_interval_s']} s,"
        f" n={reload['reloads']}"
    )
    print(
        f"        detect {reload['detect_s']} s, quiesce+exit {reload['quiesce_exit_s']} s, "
        f"new code running {reload['new_code_s']} s (max {reload['max_new_code_s']} s), "
        f"/health back {reload['healthy_s']} s"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
