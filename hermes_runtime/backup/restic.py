"""restic as the backup repository: our URLs mapped to restic's, and one way to run it.

Why restic: its repositories are deduplicated, encrypted and verifiable, and the
people who restore at 3 a.m. already know it. Our part stays what restic cannot
do (online SQLite snapshots, integrity checks, row counts, excludes: see
``staging``); everything after the staged tree is restic's.

restic reads its own variables: ``RESTIC_PASSWORD`` / ``RESTIC_PASSWORD_FILE`` /
``RESTIC_PASSWORD_COMMAND``, ``RESTIC_CACHE_DIR``, ``AWS_ACCESS_KEY_ID``,
``AWS_SECRET_ACCESS_KEY``, ``AWS_DEFAULT_REGION``. We pass the environment through
and never put a secret in an argument.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from hermes_runtime.backup.agents import LEGACY, checked_agent
from hermes_runtime.backup.binaries import find_binary
from hermes_runtime.backup.restic_errors import (
    NO_REPOSITORY,
    NO_REPOSITORY_HINT,
    STDERR_TAIL,
    command_name,
    raise_failed,
    repository_missing,
)
from hermes_runtime.common.errors import RuntimeFailure
from hermes_runtime.common.groupaccess import share_tree
from hermes_runtime.common.logs import log_event

PASSWORD_VARIABLES = ("RESTIC_PASSWORD", "RESTIC_PASSWORD_FILE", "RESTIC_PASSWORD_COMMAND")
STDERR_LINES_KEPT = 400  # restic may retry for minutes: the failure message needs only the tail
CONNECT_TIMEOUT_SECONDS = 10.0
STOP_GRACE_SECONDS = 30.0  # after SIGINT at the time limit, before SIGKILL
NO_LOCK = "--no-lock"  # restic's flag for commands that only read the repository
# For commands that lock: a fleet shares one repository, and a prune holds it exclusively
# while it runs; another agent's backup then waits for the lock instead of failing at once.
# A run's time limit (``with_time_limit``) still ends the wait.
RETRY_LOCK = ("--retry-lock=30m",)  # one argument: command_name skips flags


@dataclass(frozen=True)
class ResticRepository:
    """One repository: our URL, restic's repository string, and the environment to run with.

    ``agent``: whose snapshots the verbs act on (``agents``): restic's host of every snapshot
    ``create`` makes, the only snapshots ``prune`` forgets and ``latest`` names.
    ``on_stderr`` gets each line restic prints to stderr while it runs. restic retries a
    failing store (full, refusing writes, gone) for up to 15 minutes and says so only there:
    an operation that relays the lines shows the operator why it waits.
    """

    url: str
    repository: str
    env: Mapping[str, str] = field(repr=False)
    options: tuple[str, ...] = ()
    agent: str = LEGACY
    on_stderr: Callable[[str], None] | None = field(default=None, repr=False, compare=False)
    # time.monotonic() by which every restic run must have ended (``with_time_limit``).
    deadline: float | None = field(default=None, compare=False)

    @property
    def folder(self) -> Path | None:
        """The repository's folder for ``file://``; None for S3."""
        return None if self.repository.startswith("s3:") else Path(self.repository)

    def with_messages_to(self, on_stderr: Callable[[str], None] | None) -> ResticRepository:
        return replace(self, on_stderr=on_stderr)

    def with_time_limit(self, seconds: float | None) -> ResticRepository:
        """Every later restic run ends within ``seconds`` from now, or is stopped.

        restic retries a store that stops answering for up to 15 minutes, reporting nothing
        but on stderr: a backup Job's pod is then killed by its deadline and no failure is
        ever recorded (the backup-failed alert stays silent). With a limit, restic gets
        SIGINT (it releases its lock and exits 130), then SIGKILL after ``STOP_GRACE_SECONDS``,
        and the run fails with a message that says so.
        """
        return replace(self, deadline=None if seconds is None else time.monotonic() + seconds)


def restic_binary() -> str:
    """``$HERMES_RUNTIME_RESTIC``, else ``restic`` on PATH (the image and ci/install-tools.sh)."""
    hint = "the agent image carries v0.19.1; tests/support/restic.py builds the same"
    return find_binary("restic", hint)


def open_repository(
    url: str,
    s3_endpoint: str | None = None,
    environ: Mapping[str, str] | None = None,
    agent: str = LEGACY,
) -> ResticRepository:
    """Map ``file:///path`` or ``s3://bucket/prefix`` to a restic repository, for ``agent``.

    A missing password and a bad agent name are refused here, before anything runs, naming
    the variables or the name.
    """
    checked_agent(agent)
    env = dict(os.environ if environ is None else environ)
    parts = urlsplit(url)
    if not (parts.scheme == "file" and parts.path and not parts.netloc) and not (
        parts.scheme == "s3" and parts.netloc
    ):
        raise RuntimeFailure(f"--target {url}: expected file:///path or s3://bucket/prefix")
    if not any(env.get(name) for name in PASSWORD_VARIABLES):
        raise RuntimeFailure(
            f"backup repository {url}: no password: set RESTIC_PASSWORD or RESTIC_PASSWORD_FILE "
            "(restic encrypts every repository; losing the password loses the backups)"
        )
    if parts.scheme == "file":
        return ResticRepository(url, parts.path, env, agent=agent)
    endpoint = s3_endpoint or env.get("AWS_ENDPOINT_URL_S3") or env.get("AWS_ENDPOINT_URL")
    base = (endpoint or "https://s3.amazonaws.com").rstrip("/")
    prefix = parts.path.strip("/")
    repository = f"s3:{base}/{parts.netloc}" + (f"/{prefix}" if prefix else "")
    if env.get("AWS_REGION") and not env.get("AWS_DEFAULT_REGION"):
        env["AWS_DEFAULT_REGION"] = env["AWS_REGION"]
    # Self-hosted S3 (SeaweedFS, MinIO, Ceph) serves path-style buckets.
    options = ("-o", "s3.bucket-lookup=path") if endpoint else ()
    return ResticRepository(url, repository, env, options, agent)


def _command(repo: ResticRepository, args: Sequence[str]) -> list[str]:
    """The argv of one restic run, after a quick reachability check of an S3 endpoint.

    restic retries an unreachable backend for minutes; a refused or unroutable endpoint
    should fail now, naming it, as every other command of ours does.
    """
    if repo.folder is None:
        _check_reachable(repo)
    return [restic_binary(), "--repo", repo.repository, *repo.options, *_cache(repo), *args]


CACHE_VARIABLES = ("RESTIC_CACHE_DIR", "XDG_CACHE_HOME", "HOME")


def _cache(repo: ResticRepository) -> list[str]:
    """``--no-cache`` when the environment names no folder for restic's cache.

    restic up to 0.18 then warned and ran without a cache; 0.19 fails ("unable to locate
    cache directory"). A shell without ``HOME`` (``env -i``, a bare exec) keeps working, as
    before; the chart sets ``RESTIC_CACHE_DIR`` on the scratch volume.
    """
    return [] if any(repo.env.get(name) for name in CACHE_VARIABLES) else ["--no-cache"]


def _check_reachable(repo: ResticRepository) -> None:
    endpoint = urlsplit(repo.repository.removeprefix("s3:"))
    host = endpoint.hostname or ""
    port = endpoint.port or (80 if endpoint.scheme == "http" else 443)
    try:
        socket.create_connection((host, port), timeout=CONNECT_TIMEOUT_SECONDS).close()
    except OSError as exc:
        raise RuntimeFailure(
            f"backup repository {repo.url}: cannot reach the S3 endpoint "
            f"{endpoint.scheme}://{host}:{port}: {exc}"
        ) from exc


def run_restic(
    repo: ResticRepository,
    args: Sequence[str],
    *,
    cwd: Path | None = None,
    check: bool = True,
) -> subprocess.CompletedProcess[str]:
    """Run one restic command on ``repo``; a failure names the repository and restic's words."""
    stdout: list[str] = []
    done = _run_relaying(repo, args, stdout.append, cwd)
    done.stdout = "".join(stdout)
    if check:
        raise_failed(repo.url, args, done)
    return done


def stream_restic(
    repo: ResticRepository,
    args: Sequence[str],
    on_record: Callable[[dict[str, Any]], None],
    *,
    cwd: Path | None = None,
    create_missing: bool = False,
) -> list[dict[str, Any]]:
    """Run a ``--json`` restic command, handing each line's record to ``on_record`` as it comes.

    A failure raises ``ResticFailed`` holding the records printed before it.

    A long backup then moves a progress bar (or logs progress lines) while restic works.
    ``create_missing``: where restic finds no repository, ``restic init`` and run again; a new
    folder repository is opened to the group (the backup roles of a pod run as UIDs of their
    own and share it through the pod's group: restic then creates every later file so). Why
    not probe first: every restic run derives the key (a deliberately costly step), so a probe
    before each backup to S3 would double that cost for every backup, to help only the first.
    restic's lines about the missing repository are then not relayed.
    """
    records: list[dict[str, Any]] = []

    def take(line: str) -> None:
        for record in json_lines(line):
            records.append(record)
            on_record(record)

    first = repo.with_messages_to(_without_missing(repo)) if create_missing else repo
    done = _run_relaying(first, args, take, cwd)
    if create_missing and done.returncode != 0 and repository_missing(done):
        run_restic(repo, ["init"])
        if repo.folder is not None:
            share_tree(repo.folder)  # the pod's group: restic then keeps new files so too
        done = _run_relaying(repo, args, take, cwd)
    raise_failed(repo.url, args, done, records)
    return records


MISSING_REPOSITORY_WORDS = (NO_REPOSITORY, NO_REPOSITORY_HINT)


def _without_missing(repo: ResticRepository) -> Callable[[str], None] | None:
    relay = repo.on_stderr
    if relay is None:
        return None

    def relay_others(line: str) -> None:
        if line != repo.repository and not any(w in line for w in MISSING_REPOSITORY_WORDS):
            relay(line)

    return relay_others


def _run_relaying(
    repo: ResticRepository,
    args: Sequence[str],
    on_stdout_line: Callable[[str], None],
    cwd: Path | None,
) -> subprocess.CompletedProcess[str]:
    """The one way restic runs: stdout lines to ``on_stdout_line``, stderr lines relayed.

    The returned process holds the tail of stderr (for the failure message) and no stdout.
    """
    command = _command(repo, args)
    remaining = None if repo.deadline is None else repo.deadline - time.monotonic()
    if remaining is not None and remaining <= 0:
        raise _over_time(repo, args, "")
    kept: deque[str] = deque(maxlen=STDERR_LINES_KEPT)
    stopped = threading.Event()
    with subprocess.Popen(
        command,
        cwd=cwd,
        env=dict(repo.env),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        encoding="utf-8",
        errors="replace",
    ) as process:
        assert process.stdout is not None and process.stderr is not None
        relay = threading.Thread(
            target=_relay_lines, args=(process.stderr, kept, repo.on_stderr), daemon=True
        )
        relay.start()
        timer = None
        if remaining is not None:
            timer = threading.Timer(remaining, _stop, args=(process, stopped))
            timer.daemon = True
            timer.start()
        try:
            for line in process.stdout:
                on_stdout_line(line)
            relay.join()
        finally:
            if timer is not None:
                timer.cancel()
    if stopped.is_set():
        raise _over_time(repo, args, "".join(kept))
    return subprocess.CompletedProcess(command, process.returncode, "", "".join(kept))


def _stop(process: subprocess.Popen[str], stopped: threading.Event) -> None:
    """The time limit: SIGINT (restic unlocks and exits), SIGKILL if it does not."""
    if process.poll() is not None:
        return
    stopped.set()
    process.send_signal(signal.SIGINT)
    try:
        process.wait(STOP_GRACE_SECONDS)
    except subprocess.TimeoutExpired:
        process.kill()


def _over_time(repo: ResticRepository, args: Sequence[str], stderr: str) -> RuntimeFailure:
    last = next((line.strip() for line in reversed(stderr.splitlines()) if line.strip()), "")
    said = f"; restic's last words: {last}" if last else ""
    return RuntimeFailure(
        f"restic {command_name(args)} on {repo.url} did not finish within the time limit "
        f"(--timeout) and was stopped: the store did not answer in time{said}"
    )


def _relay_lines(
    lines: Iterable[str], kept: deque[str], on_line: Callable[[str], None] | None
) -> None:
    for line in lines:
        kept.append(line)
        text = line.strip()
        if text and on_line is not None:
            on_line(text)


def require_folder(repo: ResticRepository) -> None:
    """A ``file://`` repository's folder must exist: an unmounted backup volume is an error."""
    if repo.folder is not None and not repo.folder.is_dir():
        raise RuntimeFailure(
            f"--target {repo.url}: {repo.repository} is not a folder "
            "(is the backup volume mounted?)"
        )


def json_lines(text: str) -> list[dict[str, Any]]:
    """restic's ``--json`` output: one object per line (progress, then a summary)."""
    records = []
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("{"):
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError:
                continue
    return records


def json_document(text: str) -> Any:
    """The one JSON document (array or object) in restic's output, skipping other lines."""
    for line in text.splitlines():
        if line.strip().startswith(("[", "{")):
            return json.loads(line)
    raise RuntimeFailure(f"restic printed no JSON: {text.strip()[-STDERR_TAIL:]}")


def logged(event: str) -> Callable[[str], None]:
    """Relays restic's stderr as structured lines: why a command waits on a failing store."""
    return lambda line: log_event(event, message=line)
