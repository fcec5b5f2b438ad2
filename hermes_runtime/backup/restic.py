"""restic as the backup repository: our URLs mapped to restic's, and one way to run it.

Why restic: its repositories are deduplicated, encrypted and verifiable, and the
people who restore at 3 a.m. already know it. Our part stays what restic cannot
do (online SQLite snapshots, integrity checks, row counts, excludes: see
``restic_engine``); everything after the staged tree is restic's.

restic reads its own variables: ``RESTIC_PASSWORD`` / ``RESTIC_PASSWORD_FILE`` /
``RESTIC_PASSWORD_COMMAND``, ``RESTIC_CACHE_DIR``, ``AWS_ACCESS_KEY_ID``,
``AWS_SECRET_ACCESS_KEY``, ``AWS_DEFAULT_REGION``. We pass the environment through
and never put a secret in an argument.
"""

from __future__ import annotations

import contextlib
import fcntl
import io
import json
import os
import socket
import subprocess
import threading
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import IO, Any, TypeVar
from urllib.parse import urlsplit

from hermes_runtime.backup.binaries import find_binary
from hermes_runtime.common.errors import RuntimeFailure

BINARY_ENV = "HERMES_RUNTIME_RESTIC"
PASSWORD_VARIABLES = ("RESTIC_PASSWORD", "RESTIC_PASSWORD_FILE", "RESTIC_PASSWORD_COMMAND")
# restic >= 0.17 exit codes (restic help: "Exit status")
EXIT_NO_REPOSITORY = 10
EXIT_WRONG_PASSWORD = 12
STDERR_TAIL = 1500
STDERR_LINES_KEPT = 400  # restic may retry for minutes: the failure message needs only the tail
CONNECT_TIMEOUT_SECONDS = 10.0
# restic writes a dump blob by blob (a piece each): a pipe of 1 MiB (Linux's default ceiling for
# unprivileged processes) instead of 64 KiB took a 1 GiB dump from 4.5 to 3.0 s here.
PIPE_BYTES = 1 << 20
EXIT_GRACE_SECONDS = 2.0  # for restic to exit after the stream it wrote ended early
T = TypeVar("T")


@dataclass(frozen=True)
class ResticRepository:
    """One repository: our URL, restic's repository string, and the environment to run with.

    ``on_stderr`` gets each line restic prints to stderr while it runs. restic retries a
    failing store (full, refusing writes, gone) for up to 15 minutes and says so only there:
    an operation that relays the lines shows the operator why it waits.
    """

    url: str
    repository: str
    env: Mapping[str, str] = field(repr=False)
    options: tuple[str, ...] = ()
    on_stderr: Callable[[str], None] | None = field(default=None, repr=False, compare=False)

    @property
    def folder(self) -> Path | None:
        """The repository's folder for ``file://``; None for S3."""
        return None if self.repository.startswith("s3:") else Path(self.repository)

    def with_messages_to(self, on_stderr: Callable[[str], None] | None) -> ResticRepository:
        return replace(self, on_stderr=on_stderr)


def restic_binary() -> str:
    """``$HERMES_RUNTIME_RESTIC``, else ``restic`` on PATH (the image and ci/install-tools.sh)."""
    hint = "ci/install-tools.sh builds v0.18.1; Debian's restic 0.14 works too"
    return find_binary("restic", BINARY_ENV, hint)


def open_repository(
    url: str, s3_endpoint: str | None = None, environ: Mapping[str, str] | None = None
) -> ResticRepository:
    """Map ``file:///path`` or ``s3://bucket/prefix`` to a restic repository.

    A missing password is refused here, before anything runs, with the variables named.
    """
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
        return ResticRepository(url, parts.path, env)
    endpoint = s3_endpoint or env.get("AWS_ENDPOINT_URL_S3") or env.get("AWS_ENDPOINT_URL")
    base = (endpoint or "https://s3.amazonaws.com").rstrip("/")
    prefix = parts.path.strip("/")
    repository = f"s3:{base}/{parts.netloc}" + (f"/{prefix}" if prefix else "")
    if env.get("AWS_REGION") and not env.get("AWS_DEFAULT_REGION"):
        env["AWS_DEFAULT_REGION"] = env["AWS_REGION"]
    # Self-hosted S3 (SeaweedFS, MinIO, Ceph) serves path-style buckets.
    options = ("-o", "s3.bucket-lookup=path") if endpoint else ()
    return ResticRepository(url, repository, env, options)


def _command(repo: ResticRepository, args: Sequence[str]) -> list[str]:
    """The argv of one restic run, after a quick reachability check of an S3 endpoint.

    restic retries an unreachable backend for minutes; a refused or unroutable endpoint
    should fail now, naming it, as every other command of ours does.
    """
    if repo.folder is None:
        _check_reachable(repo)
    return [restic_binary(), "--repo", repo.repository, *repo.options, *args]


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
    if check and done.returncode != 0:
        raise RuntimeFailure(failure_message(repo, args, done))
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

    A long backup then moves a progress bar (or logs progress lines) while restic works.
    ``create_missing``: where restic finds no repository, ``restic init`` and run again. Why
    not probe first: every restic run derives the key (about 0.5 s of CPU here), so a probe
    before each backup to S3 doubled that for every backup, to help only the first. restic's
    lines about the missing repository are then not relayed.
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
        done = _run_relaying(repo, args, take, cwd)
    if done.returncode != 0:
        raise RuntimeFailure(failure_message(repo, args, done))
    return records


# What restic prints when no repository is at the location (0.14 to 0.18; 0.18 with --json
# prints one JSON line holding the same words), then the location.
NO_REPOSITORY = "repository does not exist"
NO_REPOSITORY_HINT = "Is there a repository at the"
MISSING_REPOSITORY_WORDS = (NO_REPOSITORY, NO_REPOSITORY_HINT)


def _without_missing(repo: ResticRepository) -> Callable[[str], None] | None:
    relay = repo.on_stderr
    if relay is None:
        return None

    def relay_others(line: str) -> None:
        if line != repo.repository and not any(w in line for w in MISSING_REPOSITORY_WORDS):
            relay(line)

    return relay_others


def read_restic_stream(
    repo: ResticRepository, args: Sequence[str], consume: Callable[[IO[bytes]], T]
) -> T:
    """Run a restic command whose stdout is data (``dump``); ``consume`` reads it as it comes.

    If ``consume`` fails, restic is killed; if restic fails, the failure names the
    repository and restic's words, whatever ``consume`` returned.
    """
    command = _command(repo, args)
    kept: deque[str] = deque(maxlen=STDERR_LINES_KEPT)
    with subprocess.Popen(
        command,
        env=dict(repo.env),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    ) as process:
        assert process.stdout is not None and process.stderr is not None
        with contextlib.suppress(OSError):  # a smaller pipe is only slower
            fcntl.fcntl(process.stdout.fileno(), fcntl.F_SETPIPE_SZ, PIPE_BYTES)
        errors = io.TextIOWrapper(process.stderr, encoding="utf-8", errors="replace")
        relay = threading.Thread(
            target=_relay_lines, args=(errors, kept, repo.on_stderr), daemon=True
        )
        relay.start()
        try:
            result = consume(process.stdout)
            while process.stdout.read(PIPE_BYTES):  # what ``consume`` left: restic must finish
                pass
        except BaseException as exc:
            # A stream cut short is usually restic failing: then its words are the error.
            failed_alone = _exited_within(process, EXIT_GRACE_SECONDS) and process.returncode
            process.kill()
            relay.join()
            if failed_alone:
                raise RuntimeFailure(failure_message(repo, args, _done(process, kept))) from exc
            raise
        relay.join()
    if process.returncode != 0:
        raise RuntimeFailure(failure_message(repo, args, _done(process, kept)))
    return result


def _exited_within(process: subprocess.Popen[bytes], seconds: float) -> bool:
    try:
        process.wait(timeout=seconds)
    except subprocess.TimeoutExpired:
        return False
    return True


def _done(process: subprocess.Popen[bytes], kept: deque[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.CompletedProcess(process.args, process.returncode, "", "".join(kept))


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
    kept: deque[str] = deque(maxlen=STDERR_LINES_KEPT)
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
        for line in process.stdout:
            on_stdout_line(line)
        relay.join()
    return subprocess.CompletedProcess(command, process.returncode, "", "".join(kept))


def _relay_lines(
    lines: Iterable[str], kept: deque[str], on_line: Callable[[str], None] | None
) -> None:
    for line in lines:
        kept.append(line)
        text = line.strip()
        if text and on_line is not None:
            on_line(text)


def failure_message(
    repo: ResticRepository, args: Sequence[str], done: subprocess.CompletedProcess[str]
) -> str:
    tail = done.stderr.strip()[-STDERR_TAIL:] or done.stdout.strip()[-STDERR_TAIL:]
    if done.returncode == EXIT_WRONG_PASSWORD or "wrong password" in tail:
        return f"backup repository {repo.url}: wrong password (RESTIC_PASSWORD*): {tail}"
    return f"restic {args[0] if args else ''} on {repo.url} failed (exit {done.returncode}): {tail}"


def repository_missing(done: subprocess.CompletedProcess[str]) -> bool:
    """restic's answer when no repository is at the location (exit 10 since 0.17)."""
    return done.returncode == EXIT_NO_REPOSITORY or NO_REPOSITORY_HINT in done.stderr


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
