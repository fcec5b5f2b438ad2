"""The git-sync stand-in (ci/images/git-sync/git_sync.py) against a real git server.

The stand-in replaces upstream git-sync v4 in the registry-less CI, so its on-disk and
HTTP contract is checked here the way the agent depends on it: a real `git http-backend`
(the e2e git server's image, ci/images/git-server, in a container) serves bare repositories,
commits are pushed with real git, and the stand-in runs as its own process with GITSYNC_*
variables as the chart renders them. The stand-in stays a process of this machine, not its
image: the tests read the files it writes, their modes and its exit codes directly; the image
tier covers the image.
"""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from plugins_testlib import GitServer, GitSshServer, PluginRepo, git, plugin_files
from support.git_ssh import keypair, known_hosts_line
from support.net import free_port

REPO_ROOT = Path(__file__).resolve().parents[3]
STANDIN = REPO_ROOT / "ci" / "images" / "git-sync" / "git_sync.py"
PERIOD = "200ms"


@pytest.fixture
def origin_root(git_server: GitServer) -> Path:
    """make_repo's bare repositories go where the git server serves them."""
    return git_server.root


def http_status(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return int(response.status), response.read().decode()
    except urllib.error.HTTPError as exc:
        return int(exc.code), exc.read().decode()
    except OSError:
        return 0, ""


def wait_for(predicate: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(0.05)


class StandIn:
    """One stand-in process with the chart's variables (plus `extra`)."""

    def __init__(self, root: Path, repo_url: str, log: Path, **extra: str) -> None:
        self.root = root
        self.log = log
        env = {
            "PATH": os.environ["PATH"],
            "HOME": str(root.parent),
            "GITSYNC_REPO": repo_url,
            "GITSYNC_REF": "HEAD",
            "GITSYNC_DEPTH": "1",
            "GITSYNC_PERIOD": PERIOD,
            "GITSYNC_ROOT": str(root),
            "GITSYNC_LINK": "current",
            "GITSYNC_MAX_FAILURES": "0",
            "GITSYNC_GROUP_WRITE": "true",
            **extra,
        }
        with log.open("wb") as out:
            self.process = subprocess.Popen(
                [sys.executable, str(STANDIN)], env=env, stdout=out, stderr=subprocess.STDOUT
            )

    def wait(self, timeout: float = 60) -> int:
        return self.process.wait(timeout=timeout)

    def output(self) -> str:
        return self.log.read_text()

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            self.process.wait(timeout=10)


@pytest.fixture
def standins(tmp_path: Path) -> Iterator[Callable[..., StandIn]]:
    started: list[StandIn] = []

    def _start(repo_url: str, name: str = "plugin", **extra: str) -> StandIn:
        root = tmp_path / "data" / ".git-sync" / name
        standin = StandIn(root, repo_url, tmp_path / f"{name}-{len(started)}.log", **extra)
        started.append(standin)
        return standin

    yield _start
    for standin in started:
        standin.stop()


def linked_sha(root: Path) -> str:
    target = os.readlink(root / "current")
    assert not os.path.isabs(target), f"link target must be relative: {target}"
    return Path(target).name


def test_one_time_sync_leaves_upstreams_layout(
    git_server: GitServer, make_repo: Callable[[str], PluginRepo], standins: Callable[..., StandIn]
) -> None:
    repo = make_repo("weather")
    sha = repo.commit(plugin_files("weather", "1"))
    standin = standins(f"{git_server.url}/weather.git", GITSYNC_ONE_TIME="true")
    assert standin.wait() == 0, standin.output()
    root = standin.root
    assert os.readlink(root / "current") == f".worktrees/{sha}"
    worktree = root / ".worktrees" / sha
    assert (root / "current" / "plugin.yaml").read_text() == plugin_files("weather", "1")[
        "plugin.yaml"
    ]
    # The worktree points back at the repository relatively (the volume may be mounted
    # elsewhere in the agent), the repository is on branch git-sync with remote origin.
    assert (worktree / ".git").read_text() == f"gitdir: ../../.git/worktrees/{sha}\n"
    assert git("rev-parse", "HEAD", cwd=worktree) == sha
    assert git("symbolic-ref", "--short", "HEAD", cwd=root) == "git-sync"
    assert git("remote", "get-url", "origin", cwd=root) == f"{git_server.url}/weather.git"
    assert git("rev-parse", "--is-shallow-repository", cwd=root) == "true"  # depth 1
    # --group-write: what git-sync writes is group-writable, for the agent's fsGroup.
    for path in (root, worktree, worktree / "plugin.yaml"):
        assert os.stat(path).st_mode & stat.S_IWGRP, f"{path} is not group-writable"
    assert "exiting after one sync" in standin.output()


def test_one_time_sync_over_ssh_with_a_deploy_key(
    git_ssh_server: GitSshServer,
    make_repo: Callable[[str], PluginRepo],
    standins: Callable[..., StandIn],
) -> None:
    """GITSYNC_SSH_KEY_FILE and the known-hosts check, against the git server image's sshd."""
    repo = make_repo("weather")
    sha = repo.commit(plugin_files("weather", "1"))
    url = git_ssh_server.url_of(repo.bare)
    standin = standins(
        url,
        GITSYNC_ONE_TIME="true",
        GITSYNC_SSH_KEY_FILE=str(git_ssh_server.key),
        GITSYNC_SSH_KNOWN_HOSTS_FILE=str(git_ssh_server.known_hosts),
    )
    assert standin.wait() == 0, standin.output()
    assert linked_sha(standin.root) == sha
    assert git("remote", "get-url", "origin", cwd=standin.root) == url


def test_a_host_key_not_in_known_hosts_is_refused(
    git_ssh_server: GitSshServer,
    make_repo: Callable[[str], PluginRepo],
    standins: Callable[..., StandIn],
    tmp_path: Path,
) -> None:
    repo = make_repo("weather")
    repo.commit(plugin_files("weather", "1"))
    impostor = tmp_path / "known_hosts"
    impostor.write_text(known_hosts_line(git_ssh_server.port, keypair(tmp_path, "impostor")))
    standin = standins(
        git_ssh_server.url_of(repo.bare),
        GITSYNC_ONE_TIME="true",
        GITSYNC_SSH_KEY_FILE=str(git_ssh_server.key),
        GITSYNC_SSH_KNOWN_HOSTS_FILE=str(impostor),
    )
    assert standin.wait() == 1
    assert "Host key verification failed" in standin.output(), standin.output()
    assert not (standin.root / "current").exists()


def test_new_commit_swaps_the_link_atomically_and_removes_the_old_worktree(
    git_server: GitServer, make_repo: Callable[[str], PluginRepo], standins: Callable[..., StandIn]
) -> None:
    repo = make_repo("weather")
    first = repo.commit(plugin_files("weather", "1"))
    standin = standins(f"{git_server.url}/weather.git")
    root = standin.root
    wait_for(lambda: (root / "current").is_symlink(), 30, "the first sync")
    assert linked_sha(root) == first

    misses: list[str] = []
    stop = threading.Event()

    def read_through_the_link() -> None:
        # A consumer reading through `current` while it is swapped must never miss it.
        while not stop.is_set():
            try:
                (root / "current" / "plugin.yaml").read_bytes()
            except OSError as exc:
                misses.append(repr(exc))

    reader = threading.Thread(target=read_through_the_link)
    reader.start()
    try:
        seen = [first]
        for version in ("2", "3", "4"):
            sha = repo.commit(plugin_files("weather", version))
            wait_for(lambda sha=sha: linked_sha(root) == sha, 30, f"commit {version} linked")
            seen.append(sha)
            assert (root / "current" / "plugin.yaml").read_text() == plugin_files(
                "weather", version
            )["plugin.yaml"]

            # Only the linked worktree is left, and git forgot the old ones. Like
            # upstream, the stand-in deletes the directory first and then runs
            # `git worktree prune`, so both are awaited together.
            def only_current_left(sha: str = sha, old: tuple[str, ...] = tuple(seen[:-1])) -> bool:
                if sorted(os.listdir(root / ".worktrees")) != [sha]:
                    return False
                registered = git("worktree", "list", "--porcelain", cwd=root)
                return not any(gone in registered for gone in old)

            wait_for(only_current_left, 10, f"old worktrees removed and pruned after {version}")
    finally:
        stop.set()
        reader.join()
    assert not misses, f"reads through `current` failed during a swap: {misses[:3]}"
    assert standin.process.poll() is None, standin.output()


def test_readiness_answers_503_until_the_first_sync_then_200_and_metrics(
    git_server: GitServer, make_repo: Callable[[str], PluginRepo], standins: Callable[..., StandIn]
) -> None:
    port = free_port()
    standin = standins(
        f"{git_server.url}/late.git",
        GITSYNC_MAX_FAILURES="-1",
        GITSYNC_HTTP_BIND=f"127.0.0.1:{port}",
        GITSYNC_HTTP_METRICS="true",
    )
    base = f"http://127.0.0.1:{port}"
    wait_for(lambda: http_status(base + "/")[0] != 0, 30, "the HTTP endpoint")
    assert http_status(base + "/") == (503, "repo is not ready\n")
    wait_for(lambda: "error syncing repo, will retry" in standin.output(), 30, "a failure")
    assert http_status(base + "/")[0] == 503

    make_repo("late").commit(plugin_files("late", "1"))
    wait_for(lambda: http_status(base + "/")[0] == 200, 30, "readiness after the first sync")
    assert http_status(base + "/") == (200, "")
    status, metrics = http_status(base + "/metrics")
    assert status == 200
    assert 'git_sync_count_total{status="success"} 1' in metrics, metrics
    # Later syncs of the same commit are no-ops, not successes.
    wait_for(
        lambda: 'git_sync_count_total{status="noop"} 0' not in http_status(base + "/metrics")[1],
        30,
        "a no-op sync",
    )
    assert 'git_sync_count_total{status="success"} 1' in http_status(base + "/metrics")[1]
    assert 'git_sync_count_total{status="error"} 0' not in metrics, metrics
    assert "git_fetch_count_total" in metrics


@pytest.mark.parametrize("max_failures", [0, 3])
def test_max_failures_ends_the_process_after_that_many_failures(
    git_server: GitServer, standins: Callable[..., StandIn], max_failures: int
) -> None:
    standin = standins(f"{git_server.url}/missing.git", GITSYNC_MAX_FAILURES=str(max_failures))
    assert standin.wait() == 1, standin.output()
    log = standin.output()
    # Upstream: failCount >= max-failures aborts, so 0 and 1 both stop at the first failure.
    retries = log.count("error syncing repo, will retry")
    assert retries == max(max_failures - 1, 0), log
    assert '"too many failures, aborting"' in log.replace("'", '"'), log
    assert not (standin.root / "current").exists()


def test_a_success_resets_the_failure_count(
    git_server: GitServer, make_repo: Callable[[str], PluginRepo], standins: Callable[..., StandIn]
) -> None:
    repo = make_repo("flaky")
    first = repo.commit(plugin_files("flaky", "1"))
    standin = standins(f"{git_server.url}/flaky.git", GITSYNC_MAX_FAILURES="2")
    wait_for(lambda: (standin.root / "current").is_symlink(), 30, "the first sync")
    hidden = repo.bare.with_name("flaky.git.away")
    for _ in range(2):  # one failure each time: below the limit of 2, then a success
        repo.bare.rename(hidden)
        wait_for(lambda: "error syncing repo" in standin.output(), 30, "a failure")
        hidden.rename(repo.bare)
        marker = standin.output().count("updated successfully") + 1
        sha = repo.commit(plugin_files("flaky", f"{marker}"))
        wait_for(lambda sha=sha: linked_sha(standin.root) == sha, 30, "recovery")
        standin.log.write_text("")  # a fresh log for the next round
    assert standin.process.poll() is None, "two single failures apart must not end it"
    assert linked_sha(standin.root) != first


@pytest.mark.parametrize(
    ("variable", "value"),
    [("GITSYNC_EXECHOOK_COMMAND", "/bin/true"), ("GITSYNC_SSH", "true"), ("GIT_SYNC_REPO", "x")],
)
def test_unimplemented_variables_are_refused_before_anything_is_written(
    git_server: GitServer, standins: Callable[..., StandIn], variable: str, value: str
) -> None:
    standin = standins(f"{git_server.url}/any.git", **{variable: value})
    assert standin.wait() == 1
    assert variable in standin.output()
    assert "stand-in" in standin.output()
    assert not standin.root.exists()
