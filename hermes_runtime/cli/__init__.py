"""``hermes-runtime <group> <verb>``: parse arguments, call a capability, map errors to exit codes.

Exit codes: 0 success, 1 operational failure, 2 usage error (argparse's own
convention, an unknown command included), or a failure kind's own ``exit_code`` (3: the
secrets Job refused an existing Secret). This is the CLI's one error path:

- a usage error is found by argparse (types, choices, mutually exclusive
  groups) or raised as ``UsageError`` by a handler: ``usage:`` plus
  ``prog: error: ...``, exit 2;
- an expected failure is a ``RuntimeFailure`` (or an ``OSError``, which names
  its file): one line ``error: ...`` on stderr, exit 1;
- anything else is a bug: one ``error: unexpected ...`` line, exit 1;
- a reader that closes stdout early (``| head``) ends the command quietly.

No traceback reaches the terminal unless ``--debug`` or ``HERMES_RUNTIME_DEBUG=1``
asks for it. Each group lives in its own module with its ``NAME``, ``HELP`` and a
``register(verbs)`` function that adds its verbs; handlers take the parsed namespace and return
an exit code.

Every start is a fresh interpreter (a CronJob, an init container, an operator's
shell), so a command imports only what it runs: the group modules are light
(each handler imports its capability when it is called), and only the group
named on the command line gets its verbs built; the others are listed by name
and help line, which is all ``hermes-runtime --help`` or an unknown group's
error shows.
"""

from __future__ import annotations

import argparse
import os
import sys
import traceback
from collections.abc import Collection, Sequence

from hermes_runtime import __version__
from hermes_runtime.cli import agent, backup, lcm, plugins, secrets, vault
from hermes_runtime.cli._shared import UsageError
from hermes_runtime.cli.settings import DEBUG_ENV, cli_settings
from hermes_runtime.common.errors import RuntimeFailure

EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130

GROUPS = (plugins, backup, lcm, vault, secrets, agent)


def build_parser(groups: Collection[str] | None = None) -> argparse.ArgumentParser:
    """The whole CLI; with ``groups``, only those groups' verbs (the rest by name and help)."""
    parser = argparse.ArgumentParser(
        prog="hermes-runtime",
        description="Operate long-lived Hermes agents: plugins, backups, lossless context.",
        epilog="Exit codes: 0 success, 1 operational failure, 2 usage error.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    parser.add_argument(
        "--debug",
        action="store_true",
        help=f"show the traceback of a failure (also {DEBUG_ENV}=1)",
    )
    subparsers = parser.add_subparsers(dest="group", metavar="<group>", required=True)
    for module in GROUPS:
        group = subparsers.add_parser(module.NAME, help=module.HELP, description=module.HELP)
        if groups is None or module.NAME in groups:
            module.register(group.add_subparsers(dest="verb", metavar="<verb>", required=True))
    return parser


def named_group(argv: Sequence[str]) -> str | None:
    """The group ``argv`` runs: its first word that is not an option (no top-level
    option takes a value), or None (``--help``, ``--version``, nothing)."""
    return next((arg for arg in argv if not arg.startswith("-")), None)


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    group = named_group(argv)
    parser = build_parser([group] if group else [])
    try:
        args = parser.parse_args(argv)
    except BrokenPipeError:  # --help into a closed pipe
        return _quiet_after_closed_stdout()
    except SystemExit:  # --help or a usage error: what argparse printed is flushed here
        _flush_stdout()
        raise
    debug = bool(args.debug) or cli_settings().debug
    try:
        code = int(args.handler(args))
        sys.stdout.flush()  # a closed pipe shows here, not at interpreter exit
        return code
    except BrokenPipeError:
        return _quiet_after_closed_stdout()
    except UsageError as exc:
        args.verb_parser.error(str(exc))  # exits 2
        raise  # unreachable
    except KeyboardInterrupt:
        _report("interrupted", debug)
        return EXIT_INTERRUPTED
    except RuntimeFailure as exc:
        _report(str(exc), debug)
        return exc.exit_code
    except OSError as exc:
        _report(_describe_os_error(exc), debug)
    except Exception as exc:
        _report(
            f"unexpected {type(exc).__name__}: {exc} (a bug: rerun with --debug and report "
            "the traceback)",
            debug,
        )
    return EXIT_FAILURE


def _report(message: str, debug: bool) -> None:
    """The failure as one ``error:`` line; the traceback above it only when debugging."""
    try:
        if debug:
            traceback.print_exc(file=sys.stderr)
        print(f"error: {one_line(message)}", file=sys.stderr)
    except BrokenPipeError:
        pass


def one_line(message: str) -> str:
    """A message on one line: what a parser's multi-line report (YAML's caret under the
    column, a list of problems) says, joined with ``; `` (a space after a ``:``)."""
    lines = [line.strip() for line in message.splitlines()]
    kept = [line for line in lines if line and not line.startswith("^")]
    text = kept[0] if kept else ""
    for line in kept[1:]:
        text += (" " if text.endswith(":") else "; ") + line
    return text.rstrip(":")


def _describe_os_error(exc: OSError) -> str:
    """``path: reason`` (both paths for a rename), the way coreutils name a file."""
    reason = exc.strerror or str(exc)
    if exc.filename is None:
        return reason
    if exc.filename2 is not None:
        return f"{exc.filename} -> {exc.filename2}: {reason}"
    return f"{exc.filename}: {reason}"


def _flush_stdout() -> None:
    """Flush now, so a closed pipe is met here and silenced, not at interpreter exit (where
    Python 3.14 reports it and exits 120)."""
    try:
        sys.stdout.flush()
    except BrokenPipeError:
        _quiet_after_closed_stdout()


def _quiet_after_closed_stdout() -> int:
    """The reader left (``| head``): point stdout at /dev/null so the exit flush is silent.

    Exit 0, like ``rg`` or ``ls``: what was asked has been done, only the rest
    of the listing was not wanted.
    """
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
    return EXIT_OK
