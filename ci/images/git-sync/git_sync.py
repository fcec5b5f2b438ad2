#!/usr/bin/env python3
"""A stand-in for git-sync v4 (k8s.io/git-sync), for this project's registry-less CI only.

Why it exists: no container registry is reachable from the CI machines and the Go module
proxy refuses k8s.io/git-sync (403), so the upstream image can neither be pulled nor built.
The chart's default stays registry.k8s.io/git-sync/git-sync v4; this test double runs only
where that image cannot be had (docs/plugins.md). It is written from git-sync's README and
main.go (v4.7.1), not copied from them, and it keeps upstream's contract:

- options: the `GITSYNC_*` variables and `--flags` listed in IMPLEMENTED, nothing else.
  Any other `GITSYNC_*`/`GIT_SYNC_*` variable or flag is refused with exit 1, so a chart
  that starts rendering a new option fails the e2e suite until the stand-in learns it.
- on disk: a git repository at --root (branch `git-sync`, remote `origin`), one worktree
  per synced commit at <root>/.worktrees/<sha> (its .git file points back relatively),
  and --link (relative to --root unless absolute) a relative symlink to that worktree,
  published by creating `tmp-link` next to it and renaming it over the link (atomic).
  The previous worktree is deleted after the swap, then `worktree prune`, reflog expiry
  and `git gc`, as upstream does with its default --stale-worktree-timeout 0 and --git-gc.
- failures: each failed sync counts; when the count reaches --max-failures (default 0:
  the first failure) the process exits 1; a negative value retries forever; a success
  resets the count.
- HTTP (--http-bind): `/` (and any path) answers 503 "repo is not ready" until the first
  sync succeeded, then 200 with an empty body; --http-metrics adds /metrics with the
  upstream counter names.
- --one-time: exit 0 after the first successful sync.
- credentials: --username with $GITSYNC_PASSWORD or --password-file goes to git's
  in-memory credential cache (`git credential approve`), never into a URL or argument;
  SSH uses GIT_SSH_COMMAND with -i <key file> and StrictHostKeyChecking/UserKnownHostsFile.

Logs are one JSON object per line on stderr, like upstream's.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

VERSION = "v4-standin"
SYNC_TIMEOUT_SECONDS = 120.0  # upstream's --sync-timeout default; not settable here
CREDENTIAL_TIMEOUT_SECONDS = 30.0


@dataclass(frozen=True)
class Option:
    """One upstream option this stand-in implements: its flag, env name, kind and default."""

    flag: str
    env: str
    kind: str  # string | int | bool | duration | strings
    default: str


# Every option implemented, with upstream v4's names and defaults (README, `--man`).
# GITSYNC_PASSWORD has no flag upstream (only the deprecated --password): env only.
IMPLEMENTED: tuple[Option, ...] = (
    Option("repo", "GITSYNC_REPO", "string", ""),
    Option("ref", "GITSYNC_REF", "string", "HEAD"),
    Option("depth", "GITSYNC_DEPTH", "int", "1"),
    Option("submodules", "GITSYNC_SUBMODULES", "string", "recursive"),
    Option("period", "GITSYNC_PERIOD", "duration", "10s"),
    Option("root", "GITSYNC_ROOT", "string", ""),
    Option("link", "GITSYNC_LINK", "string", ""),
    Option("max-failures", "GITSYNC_MAX_FAILURES", "int", "0"),
    Option("group-write", "GITSYNC_GROUP_WRITE", "bool", "false"),
    Option("http-bind", "GITSYNC_HTTP_BIND", "string", ""),
    Option("http-metrics", "GITSYNC_HTTP_METRICS", "bool", "false"),
    Option("one-time", "GITSYNC_ONE_TIME", "bool", "false"),
    Option("username", "GITSYNC_USERNAME", "string", ""),
    Option("", "GITSYNC_PASSWORD", "string", ""),
    Option("password-file", "GITSYNC_PASSWORD_FILE", "string", ""),
    Option("git-config", "GITSYNC_GIT_CONFIG", "string", ""),
    Option("ssh-key-file", "GITSYNC_SSH_KEY_FILE", "strings", "/etc/git-secret/ssh"),
    Option("ssh-known-hosts", "GITSYNC_SSH_KNOWN_HOSTS", "bool", "true"),
    Option(
        "ssh-known-hosts-file",
        "GITSYNC_SSH_KNOWN_HOSTS_FILE",
        "string",
        "/etc/git-secret/known_hosts",
    ),
)
IMPLEMENTED_ENV = frozenset(o.env for o in IMPLEMENTED)
IMPLEMENTED_FLAGS = frozenset(o.flag for o in IMPLEMENTED if o.flag)
PRINT_AND_EXIT_FLAGS = frozenset({"version", "help"})
REFUSED_ENV_PREFIXES = ("GITSYNC_", "GIT_SYNC_")
SUBMODULE_MODES = ("recursive", "shallow", "off")  # upstream's --submodules values


class ConfigError(Exception):
    """A variable or flag the stand-in refuses; the message names it."""


class SyncError(Exception):
    """One sync attempt failed (counted against --max-failures)."""


def log(msg: str, **fields: Any) -> None:
    record = {"ts": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime()), "msg": msg, **fields}
    print(json.dumps(record, default=str), file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------------------
# Options


_DURATION_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
_DURATION_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|ms|s|m|h)")


def parse_duration(text: str, name: str) -> float:
    """Go's time.ParseDuration ("1m30s", "500ms", "0"), in seconds."""
    value = text.strip()
    if value in ("0", "+0", "-0"):
        return 0.0
    sign = -1.0 if value.startswith("-") else 1.0
    body = value.lstrip("+-")
    pos, total = 0, 0.0
    while pos < len(body):
        match = _DURATION_PART.match(body, pos)
        if match is None:
            raise ConfigError(f"invalid duration {text!r} for {name}")
        total += float(match.group(1)) * _DURATION_UNITS[match.group(2)]
        pos = match.end()
    if not body:
        raise ConfigError(f"invalid duration {text!r} for {name}")
    return sign * total


def parse_bool(text: str, name: str) -> bool:
    """Go's strconv.ParseBool."""
    if text in ("1", "t", "T", "TRUE", "true", "True"):
        return True
    if text in ("0", "f", "F", "FALSE", "false", "False"):
        return False
    raise ConfigError(f"invalid bool {text!r} for {name}")


def parse_int(text: str, name: str) -> int:
    try:
        return int(text.strip(), 0)
    except ValueError:
        raise ConfigError(f"invalid integer {text!r} for {name}") from None


def refused_env(environ: Mapping[str, str]) -> list[str]:
    return sorted(
        k for k in environ if k.startswith(REFUSED_ENV_PREFIXES) and k not in IMPLEMENTED_ENV
    )


def raw_values(argv: Sequence[str], environ: Mapping[str, str]) -> dict[str, str]:
    """env name -> text: environment first, then flags (flags win, as with pflag)."""
    unknown = refused_env(environ)
    if unknown:
        raise ConfigError(
            f"unsupported variable(s) {', '.join(unknown)}: this git-sync stand-in implements "
            f"only {', '.join(sorted(IMPLEMENTED_ENV))} (ci/images/git-sync/git_sync.py)"
        )
    values = {o.env: environ[o.env] for o in IMPLEMENTED if o.env in environ}
    by_flag = {o.flag: o for o in IMPLEMENTED if o.flag}
    args = list(argv)
    from_flags: set[str] = set()
    while args:
        arg = args.pop(0)
        if not arg.startswith("--"):
            raise ConfigError(
                f"unsupported argument {arg!r}: this git-sync stand-in takes only --flags"
            )
        name, has_value, value = arg[2:].partition("=")
        option = by_flag.get(name)
        if option is None:
            raise ConfigError(
                f"unsupported flag --{name}: this git-sync stand-in implements only "
                f"{', '.join('--' + f for f in sorted(IMPLEMENTED_FLAGS))}"
            )
        if not has_value:
            if option.kind == "bool":
                value = "true"
            elif args:
                value = args.pop(0)
            else:
                raise ConfigError(f"flag needs an argument: --{name}")
        if option.kind == "strings" and option.env in from_flags:
            values[option.env] += ":" + value  # a repeated flag appends, as pflag's arrays
        else:
            values[option.env] = value
        from_flags.add(option.env)
    return values


@dataclass(frozen=True)
class Config:
    repo: str
    ref: str
    depth: int
    period: float
    root: Path
    link: Path
    max_failures: int
    group_write: bool
    http_bind: str
    http_metrics: bool
    one_time: bool
    username: str
    password: str = field(repr=False)
    password_file: str
    ssh_key_files: tuple[str, ...]
    ssh_known_hosts: bool
    ssh_known_hosts_file: str
    git_configs: tuple[tuple[str, str], ...] = ()
    submodules: str = "recursive"


def parse_git_configs(text: str) -> tuple[tuple[str, str], ...]:
    """--git-config's 'key:val,key:val' (upstream's parseGitConfigs), unquoted forms only:
    a quoted key or value, or an escape, is refused rather than read differently."""
    pairs = []
    for item in (part for part in text.split(",") if part):
        key, colon, value = item.partition(":")
        if not colon or not key:
            raise ConfigError(f"can't parse --git-config flag: key {key!r}: no value")
        if '"' in item or "\\" in item:
            raise ConfigError(f"--git-config {item!r}: quoted keys and values are not implemented")
        pairs.append((key, value))
    return tuple(pairs)


def load_config(argv: Sequence[str], environ: Mapping[str, str]) -> Config:
    """Parse and validate like upstream: the same required flags and combinations."""
    raw = raw_values(argv, environ)
    text = {o.env: raw.get(o.env, o.default) for o in IMPLEMENTED}

    def flag(env: str) -> str:
        option = next(o for o in IMPLEMENTED if o.env == env)
        return f"--{option.flag}" if option.flag else f"${env}"

    root, repo = text["GITSYNC_ROOT"], text["GITSYNC_REPO"]
    if not root:
        raise ConfigError("required flag: --root must be specified")
    if not repo:
        raise ConfigError("required flag: --repo must be specified")
    if not text["GITSYNC_REF"]:
        raise ConfigError("required flag: --ref must be specified")
    depth = parse_int(text["GITSYNC_DEPTH"], flag("GITSYNC_DEPTH"))
    if depth < 0:
        raise ConfigError("invalid flag: --depth must be greater than or equal to 0")
    period = parse_duration(text["GITSYNC_PERIOD"], "--period")
    if period < 0.01:
        raise ConfigError("invalid flag: --period must be at least 10ms")
    username, password = text["GITSYNC_USERNAME"], text["GITSYNC_PASSWORD"]
    password_file = text["GITSYNC_PASSWORD_FILE"]
    repo, username, password = _split_url_credentials(repo, username, password)
    if username:
        if not password and not password_file:
            raise ConfigError(
                "required flag: $GITSYNC_PASSWORD or --password-file must be specified "
                "when --username is specified"
            )
        if password and password_file:
            raise ConfigError(
                "invalid flag: only one of $GITSYNC_PASSWORD and --password-file may be specified"
            )
    elif password:
        raise ConfigError(
            "invalid flag: $GITSYNC_PASSWORD may only be specified when --username is specified"
        )
    elif password_file:
        raise ConfigError(
            "invalid flag: --password-file may only be specified when --username is specified"
        )
    http_bind = text["GITSYNC_HTTP_BIND"]
    http_metrics = parse_bool(text["GITSYNC_HTTP_METRICS"], flag("GITSYNC_HTTP_METRICS"))
    if http_metrics and not http_bind:
        raise ConfigError("required flag: --http-bind must be specified when --http-metrics is set")
    link_text = text["GITSYNC_LINK"] or repo.strip("/").split("/")[-1]
    root_path = Path(os.path.abspath(root))
    submodules = text["GITSYNC_SUBMODULES"]
    if submodules not in SUBMODULE_MODES:
        raise ConfigError(
            'invalid flag: --submodules must be one of "recursive", "shallow", or "off"'
        )
    return Config(
        repo=repo,
        ref=text["GITSYNC_REF"],
        depth=depth,
        period=period,
        root=root_path,
        link=Path(link_text) if os.path.isabs(link_text) else root_path / link_text,
        max_failures=parse_int(text["GITSYNC_MAX_FAILURES"], "--max-failures"),
        group_write=parse_bool(text["GITSYNC_GROUP_WRITE"], "--group-write"),
        http_bind=http_bind,
        http_metrics=http_metrics,
        one_time=parse_bool(text["GITSYNC_ONE_TIME"], "--one-time"),
        username=username,
        password=password,
        password_file=password_file,
        ssh_key_files=tuple(p for p in text["GITSYNC_SSH_KEY_FILE"].split(":") if p),
        ssh_known_hosts=parse_bool(text["GITSYNC_SSH_KNOWN_HOSTS"], "--ssh-known-hosts"),
        ssh_known_hosts_file=text["GITSYNC_SSH_KNOWN_HOSTS_FILE"],
        git_configs=parse_git_configs(text["GITSYNC_GIT_CONFIG"]),
        submodules=submodules,
    )


def _split_url_credentials(repo: str, username: str, password: str) -> tuple[str, str, str]:
    """user:pass@ in an http(s) --repo becomes --username/$GITSYNC_PASSWORD, as upstream."""
    parts = urlsplit(repo)
    if parts.scheme not in ("http", "https") or "@" not in parts.netloc:
        return repo, username, password
    if username:
        raise ConfigError(
            "invalid flag: credentials may not be specified in --repo when --username is specified"
        )
    user = parts.username or ""
    secret = parts.password if parts.password is not None else password
    host = parts.netloc.rsplit("@", 1)[1]
    return urlunsplit(parts._replace(netloc=host)), user, secret


# ---------------------------------------------------------------------------------------
# git


class Git:
    """git commands run in a private global config (GIT_CONFIG_GLOBAL), as upstream does."""

    def __init__(self, config: Config, env: dict[str, str]) -> None:
        self.config = config
        self.env = env

    def run(
        self, *args: str, cwd: Path | None = None, stdin: str | None = None, check: bool = True
    ) -> str:
        try:
            done = subprocess.run(
                ["git", *args],
                cwd=cwd,
                env=self.env,
                input=stdin,
                capture_output=True,
                text=True,
                timeout=SYNC_TIMEOUT_SECONDS,
                check=False,
            )
        except subprocess.TimeoutExpired as exc:
            raise SyncError(f"git {args[0]} timed out after {exc.timeout:.0f}s") from None
        if check and done.returncode != 0:
            raise SyncError(
                f"git {' '.join(_redact(a) for a in args)} exited {done.returncode}: "
                f"{_redact(done.stderr.strip())}"
            )
        return done.stdout.strip()


def _redact(text: str) -> str:
    return re.sub(r"(https?://)[^/@\s]+@", r"\1REDACTED@", text)


def git_environment(config: Config, base: Mapping[str, str]) -> dict[str, str]:
    """The environment for every git call: a private gitconfig, SSH options, no prompts."""
    fd, gitconfig = tempfile.mkstemp(prefix="git-sync.gitconfig.")
    os.close(fd)
    env = dict(base)
    env["GIT_CONFIG_GLOBAL"] = gitconfig
    env["GIT_CONFIG_NOSYSTEM"] = "true"
    env["GIT_TERMINAL_PROMPT"] = "0"
    ssh = base.get("GIT_SSH_COMMAND") or "ssh"
    for key_file in config.ssh_key_files:
        ssh += f" -i {key_file}"
    if config.ssh_known_hosts:
        ssh += f" -o StrictHostKeyChecking=yes -o UserKnownHostsFile={config.ssh_known_hosts_file}"
    else:
        ssh += " -o StrictHostKeyChecking=no"
    env["GIT_SSH_COMMAND"] = ssh
    return env


def setup_git(git: Git) -> None:
    """Upstream v4.7's SetupDefaultGitConfigs (safe.directory '*' included: the root may be
    a directory the kubelet made, owned by root), then --git-config's pairs."""
    for key, value in (
        ("gc.autoDetach", "false"),
        ("gc.pruneExpire", "now"),
        ("credential.helper", "cache --timeout 3600"),
        ("core.askPass", "true"),
        ("safe.directory", "*"),
        *git.config.git_configs,
    ):
        git.run("config", "--global", key, value)


def refresh_credentials(git: Git) -> None:
    """Store --username and the password (re-read from --password-file each sync)."""
    config = git.config
    if not config.username:
        return
    password = config.password
    if config.password_file:
        try:
            password = Path(config.password_file).read_text()
        except OSError as exc:
            raise SyncError(f"can't read password file {config.password_file!r}: {exc}") from None
    creds = f"url={config.repo}\nusername={config.username}\npassword={password}\n"
    git.run("credential", "approve", stdin=creds)


# ---------------------------------------------------------------------------------------
# The sync


@dataclass
class State:
    """What the HTTP endpoint and the loop share."""

    ready: threading.Event = field(default_factory=threading.Event)
    lock: threading.Lock = field(default_factory=threading.Lock)
    counts: dict[str, int] = field(
        default_factory=lambda: {"success": 0, "error": 0, "noop": 0, "fetch": 0}
    )
    durations: dict[str, float] = field(
        default_factory=lambda: {"success": 0.0, "error": 0.0, "noop": 0.0}
    )

    def record(self, status: str, seconds: float) -> None:
        with self.lock:
            self.counts[status] += 1
            self.durations[status] += seconds


def worktree_for(config: Config, sha: str) -> Path:
    return config.root / ".worktrees" / sha


def current_worktree(config: Config) -> Path | None:
    try:
        target = os.readlink(config.link)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise SyncError(f"can't read link {config.link}: {exc}") from None
    return Path(target) if os.path.isabs(target) else config.link.parent / target


def remove_dir_contents(path: Path) -> None:
    for entry in path.iterdir():
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry)
        else:
            entry.unlink()


def repo_is_sane(git: Git) -> bool:
    root = git.config.root
    if not any(root.iterdir()):
        return False
    try:
        top = git.run("rev-parse", "--show-toplevel", cwd=root)
        git.run("fsck", "--no-progress", "--connectivity-only", cwd=root)
    except SyncError as exc:
        log("repo failed checks", path=str(root), error=str(exc))
        return False
    if os.path.realpath(top) != str(root):
        log("repo directory is under another repo", path=str(root), parent=top)
        return False
    return not (root / ".git" / "shallow.lock").exists()


def init_repo(git: Git) -> None:
    root = git.config.root
    if not root.exists():
        root.mkdir(mode=0o775, parents=True)
        needs_init = True
    elif repo_is_sane(git):
        needs_init = False
    else:
        log("repo directory was empty or failed checks", path=str(root))
        remove_dir_contents(root)
        needs_init = True
    if needs_init:
        log("initializing repo directory", path=str(root))
        git.run("init", "-b", "git-sync", cwd=root)
    url = git.run("remote", "get-url", "origin", cwd=root, check=False)
    if not url:
        git.run("remote", "add", "origin", git.config.repo, cwd=root)
    elif url != git.config.repo:
        git.run("remote", "set-url", "origin", git.config.repo, cwd=root)


def fetch(git: Git) -> str:
    config = git.config
    args = [
        "fetch",
        config.repo,
        config.ref,
        "--verbose",
        "--no-progress",
        "--prune",
        "--no-auto-gc",
    ]
    if config.depth > 0:
        args += ["--depth", str(config.depth)]
    elif git.run("rev-parse", "--is-shallow-repository", cwd=config.root) == "true":
        args.append("--unshallow")
    git.run(*args, cwd=config.root)
    return git.run("rev-parse", "FETCH_HEAD^{}", cwd=config.root)


def worktree_is_sane(git: Git, worktree: Path, sha: str) -> bool:
    if not worktree.is_dir() or not any(worktree.iterdir()):
        return False
    head = git.run("rev-parse", "HEAD", cwd=worktree, check=False)
    if head != sha:
        return False
    try:
        git.run("fsck", "--no-progress", "--connectivity-only", cwd=worktree)
    except SyncError:
        return False
    return True


def remove_worktree(git: Git, worktree: Path) -> None:
    if not worktree.exists():
        return
    log("removing worktree", path=str(worktree))
    shutil.rmtree(worktree)
    git.run("worktree", "prune", "--verbose", cwd=git.config.root)


def create_worktree(git: Git, sha: str) -> Path:
    worktree = worktree_for(git.config, sha)
    remove_worktree(git, worktree)  # a half-made one from a crash
    log("adding worktree", path=str(worktree), hash=sha)
    git.run(
        "worktree",
        "add",
        "--force",
        "--detach",
        str(worktree),
        sha,
        "--no-checkout",
        cwd=git.config.root,
    )
    return worktree


def configure_worktree(git: Git, worktree: Path, sha: str) -> None:
    """Point the worktree's .git back at the repo relatively, then check the commit out."""
    root = git.config.root
    rel = os.path.relpath(root / ".git" / "worktrees" / sha, worktree)
    (worktree / ".git").write_text(f"gitdir: {rel}\n")
    git.run("reset", "--hard", sha, "--", cwd=worktree)
    if git.config.submodules == "off":  # upstream: no submodule command at all
        return
    submodules = ["submodule", "update", "--init"]
    if git.config.submodules == "recursive":
        submodules.append("--recursive")
    if git.config.depth:
        submodules += ["--depth", str(git.config.depth)]
    git.run(*submodules, cwd=worktree)


def publish_link(config: Config, worktree: Path) -> None:
    """Create tmp-link next to the link, then rename it over the link: readers never miss."""
    link_dir = config.link.parent
    link_dir.mkdir(mode=0o775, parents=True, exist_ok=True)
    target = os.path.relpath(worktree, link_dir)
    temp = link_dir / "tmp-link"
    if temp.is_symlink() or temp.exists():
        temp.unlink()
    os.symlink(target, temp)
    os.rename(temp, config.link)


def cleanup(git: Git) -> None:
    """Delete every worktree but the linked one, then let git forget them and gc."""
    config = git.config
    current = current_worktree(config)
    keep = current.name if current is not None else ""
    base = config.root / ".worktrees"
    removed = 0
    for entry in sorted(base.iterdir()) if base.is_dir() else []:
        if entry.name == keep:
            continue
        log("removing stale worktree", path=str(entry))
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry)
        else:
            entry.unlink()
        removed += 1
    if not removed:
        return
    git.run("worktree", "prune", "--verbose", cwd=config.root)
    git.run("reflog", "expire", "--expire-unreachable=all", "--all", cwd=config.root)
    git.run("gc", cwd=config.root)


@dataclass
class Syncer:
    git: Git
    state: State
    sync_count: int = 0

    def sync(self) -> tuple[bool, str]:
        """One sync: returns (changed, remote sha)."""
        git, config = self.git, self.git.config
        refresh_credentials(git)
        init_repo(git)
        current = current_worktree(config)
        current_sha = current.name if current is not None else ""
        remote_sha = fetch(git)
        with self.state.lock:
            self.state.counts["fetch"] += 1
        if current is not None and current_sha == remote_sha:
            if not worktree_is_sane(git, current, current_sha):
                log("worktree failed checks or was empty", path=str(current))
                remove_worktree(git, current)
                current_sha = ""
        changed = current_sha != remote_sha or (
            current is not None and current != worktree_for(config, current_sha)
        )
        if not changed and self.sync_count > 0:
            return False, remote_sha
        log("update required", ref=config.ref, local=current_sha, remote=remote_sha)
        git.run("reset", "--soft", remote_sha, "--", cwd=config.root)
        worktree = create_worktree(git, remote_sha) if changed else worktree_for(config, remote_sha)
        configure_worktree(git, worktree, remote_sha)
        if changed:
            publish_link(config, worktree)
            if current is not None and current.exists():
                os.utime(current)
        self.state.ready.set()
        self.sync_count += 1
        log("updated successfully", ref=config.ref, remote=remote_sha, syncCount=self.sync_count)
        return changed, remote_sha


def run_loop(config: Config, git: Git, state: State) -> int:
    syncer = Syncer(git, state)
    failures = 0
    while True:
        started = time.monotonic()
        first = syncer.sync_count == 0  # upstream counts the first sync as a change
        try:
            changed, sha = syncer.sync()
        except (SyncError, OSError) as exc:
            failures += 1
            state.record("error", time.monotonic() - started)
            if 0 <= config.max_failures <= failures:
                log(
                    "too many failures, aborting",
                    error=str(exc),
                    failCount=failures,
                    maxFailures=config.max_failures,
                )
                return 1
            log("error syncing repo, will retry", error=str(exc), failCount=failures)
        else:
            state.record(
                "success" if changed or first else "noop",
                time.monotonic() - started,
            )
            try:
                cleanup(git)
            except (SyncError, OSError) as exc:
                log("git cleanup failed", error=str(exc))
            if config.one_time:
                log("exiting after one sync", status=0)
                return 0
            if sha == config.ref:
                log("ref appears to be a git hash, no further sync needed", ref=config.ref)
                signal.pause()
                return 0
            failures = 0
        time.sleep(config.period)


# ---------------------------------------------------------------------------------------
# HTTP


def metrics_text(state: State) -> str:
    with state.lock:
        counts, durations = dict(state.counts), dict(state.durations)
    lines = [
        "# HELP git_sync_count_total How many git syncs completed, partitioned by state"
        " (success, error, noop)",
        "# TYPE git_sync_count_total counter",
    ]
    lines += [
        f'git_sync_count_total{{status="{k}"}} {counts[k]}' for k in ("error", "noop", "success")
    ]
    lines += [
        "# HELP git_sync_duration_seconds Summary of git_sync durations",
        "# TYPE git_sync_duration_seconds summary",
    ]
    for key in ("error", "noop", "success"):
        lines.append(f'git_sync_duration_seconds_sum{{status="{key}"}} {durations[key]}')
        lines.append(f'git_sync_duration_seconds_count{{status="{key}"}} {counts[key]}')
    lines += [
        "# HELP git_fetch_count_total How many git fetches were run",
        "# TYPE git_fetch_count_total counter",
        f"git_fetch_count_total {counts['fetch']}",
    ]
    return "\n".join(lines) + "\n"


def start_http(config: Config, state: State) -> ThreadingHTTPServer:
    host, _, port = config.http_bind.rpartition(":")
    if not port.isdigit():
        raise ConfigError(f"invalid --http-bind {config.http_bind!r}: expected [HOST]:PORT")

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if config.http_metrics and urlsplit(self.path).path == "/metrics":
                self._reply(200, metrics_text(state).encode(), "text/plain; version=0.0.4")
            elif state.ready.is_set():
                self._reply(200, b"", "text/plain; charset=utf-8")
            else:
                self._reply(503, b"repo is not ready\n", "text/plain; charset=utf-8")

        def _reply(self, status: int, body: bytes, content_type: str) -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib name
            return

    bind_host = host.strip("[]") or "0.0.0.0"
    try:
        server = ThreadingHTTPServer((bind_host, int(port)), Handler)
    except OSError as exc:
        raise ConfigError(f"can't bind HTTP endpoint {config.http_bind!r}: {exc}") from None
    threading.Thread(target=server.serve_forever, daemon=True).start()
    reasons = ["liveness"] + (["metrics"] if config.http_metrics else [])
    log("serving HTTP", endpoint=config.http_bind, reasons=reasons)
    return server


# ---------------------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None, environ: Mapping[str, str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    env = dict(os.environ if environ is None else environ)
    if "--version" in args:
        print(VERSION)
        return 0
    if "--help" in args or "-h" in args:
        print(__doc__)
        return 0
    try:
        config = load_config(args, env)
    except ConfigError as exc:
        print(f"git-sync (stand-in): {exc}", file=sys.stderr, flush=True)
        return 1
    os.umask(0o002 if config.group_write else 0o022)
    log(
        "starting up",
        version=VERSION,
        pid=os.getpid(),
        uid=os.getuid(),
        gid=os.getgid(),
        home=env.get("HOME", ""),
        repo=_redact(config.repo),
        root=str(config.root),
        link=str(config.link),
    )
    if shutil.which("git") is None:
        log("FATAL: git executable not found")
        return 1
    try:
        config.root.mkdir(mode=0o775, parents=True, exist_ok=True)
        config = _normalized(config)
        git = Git(config, git_environment(config, env))
        setup_git(git)
        state = State()
        if config.http_bind:
            start_http(config, state)
    except (ConfigError, SyncError, OSError) as exc:
        log("FATAL: can't start", error=str(exc))
        return 1
    return run_loop(config, git, state)


def _normalized(config: Config) -> Config:
    """Resolve symlinks in --root (upstream does too), so worktree paths compare equal."""
    root = Path(os.path.realpath(config.root))
    if root == config.root:
        return config
    link = config.link
    if link.is_relative_to(config.root):
        link = root / link.relative_to(config.root)
    return Config(**{**config.__dict__, "root": root, "link": link})


if __name__ == "__main__":
    sys.exit(main())
