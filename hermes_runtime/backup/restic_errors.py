"""What a failed restic run means, said in one line that names what failed.

restic's exit status (``restic help``, "Exit status"; v0.19.1, what the image carries):

- 1: a fatal error. Since 0.19 an environment variable restic cannot parse
  (``RESTIC_COMPRESSION``, ``RESTIC_PACK_SIZE``, ``RESTIC_READ_CONCURRENCY``) is one; it used
  to be ignored. The message names the variable: it comes from the operator's environment
  (a Secret, a values file), not from anything our command decided.
- 3: ``backup`` saved a snapshot but could not read every source (since 0.19 also a source
  that does not exist): the snapshot is incomplete, and ``create`` removes it. ``forget``
  could not remove some snapshots (since 0.19; it used to exit 0): nothing was pruned.
- 10: no repository at the location; 11: the repository is locked; 12: wrong password.
- 130: interrupted by SIGINT (since 0.19; was 1). restic stops cleanly: a backup then wrote no
  snapshot, a forget removed only what it had removed.

With ``--json`` restic writes its last words as a JSON record on stderr (``{"message_type":
"exit_error", "code": ..., "message": ...}``): the message is taken from it.
"""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Sequence
from typing import Any

from hermes_runtime.common.errors import RuntimeFailure

EXIT_INCOMPLETE = 3  # backup: some source unreadable; forget: some snapshot not removed
EXIT_NO_REPOSITORY = 10
EXIT_LOCKED = 11
EXIT_WRONG_PASSWORD = 12
EXIT_INTERRUPTED = 130
STDERR_TAIL = 1500
INVALID_VARIABLE = re.compile(r"invalid value for (RESTIC_[A-Z_]+)")
NOT_REMOVED = re.compile(r"unable to remove snapshots?/([0-9a-f]+)")
# What restic prints when no repository is at the location (0.14 to 0.19; with --json one JSON
# line holding the same words), then the location.
NO_REPOSITORY = "repository does not exist"
NO_REPOSITORY_HINT = "Is there a repository at the"


class ResticFailed(RuntimeFailure):
    """A restic run that exited non-zero; ``records`` holds the JSON records it printed."""

    def __init__(self, message: str, code: int, records: list[dict[str, Any]]) -> None:
        super().__init__(message)
        self.code = code
        self.records = records


def command_name(args: Sequence[str]) -> str:
    """The restic command of ``args`` (``snapshots`` of ``--no-lock snapshots --json``)."""
    return next((arg for arg in args if not arg.startswith("-")), "")


def restic_words(done: subprocess.CompletedProcess[str]) -> str:
    """restic's own last words: its ``exit_error`` record's message (the first line), else
    its stderr's tail."""
    for line in reversed(done.stderr.splitlines()):
        if line.startswith("{"):
            try:
                record = json.loads(line)
            except ValueError:
                continue
            if isinstance(record, dict) and record.get("message_type") == "exit_error":
                # Its first line: an error restic did not expect carries Go's stack after it.
                return str(record.get("message", "")).strip().split("\n", 1)[0]
    tail = done.stderr.strip() or done.stdout.strip()
    return tail[-STDERR_TAIL:]


def failure_message(
    repo_url: str, args: Sequence[str], done: subprocess.CompletedProcess[str]
) -> str:
    """One line saying what failed: the repository, the command, and restic's words."""
    words = restic_words(done)
    command = command_name(args)
    code = done.returncode
    variable = INVALID_VARIABLE.search(done.stderr)
    if variable:
        return (
            f"backup repository {repo_url}: restic refuses the environment variable "
            f"{variable.group(1)} (fix or unset it): {words}"
        )
    if code == EXIT_WRONG_PASSWORD or "wrong password" in words:
        return f"backup repository {repo_url}: wrong password (RESTIC_PASSWORD*): {words}"
    if code == EXIT_INTERRUPTED:
        return f"restic {command} on {repo_url} was interrupted (SIGINT, exit 130): {words}"
    if code == EXIT_INCOMPLETE and command == "backup":
        return (
            f"restic backup on {repo_url} could not read every file it was given "
            f"(exit 3): {_skipped(done) or words}"
        )
    if code == EXIT_INCOMPLETE and command == "forget":
        ids = NOT_REMOVED.findall(done.stderr)
        named = ", ".join(ids) if ids else "some snapshots"
        return (
            f"restic forget on {repo_url} could not remove {named} (exit 3); nothing was "
            f"pruned: {words}"
        )
    if code == EXIT_LOCKED:
        return f"backup repository {repo_url} is locked by another restic (exit 11): {words}"
    return f"restic {command} on {repo_url} failed (exit {code}): {words}"


def _skipped(done: subprocess.CompletedProcess[str]) -> str:
    """What restic says it skipped or could not read: its text lines, its JSON error records."""
    found = []
    for line in done.stderr.splitlines():
        if not line.startswith("{"):
            if "skipping" in line:
                found.append(line.strip())
            continue
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict) and record.get("message_type") == "error":
            error = record.get("error") or {}
            message = error.get("message", "") if isinstance(error, dict) else str(error)
            found.append(f"{record.get('item', '')}: {message}")
    return "; ".join(found)[-STDERR_TAIL:]


def repository_missing(done: subprocess.CompletedProcess[str]) -> bool:
    """restic's answer when no repository is at the location (exit 10 since 0.17)."""
    return done.returncode == EXIT_NO_REPOSITORY or NO_REPOSITORY_HINT in done.stderr


def raise_failed(
    repo_url: str,
    args: Sequence[str],
    done: subprocess.CompletedProcess[str],
    records: list[dict[str, Any]] | None = None,
) -> None:
    """Raise ``ResticFailed`` for ``done`` when it failed; nothing when it exited 0."""
    if done.returncode != 0:
        raise ResticFailed(failure_message(repo_url, args, done), done.returncode, records or [])
