"""What every group module shares: verbs with the common options, argument types, defaults.

Usage errors belong to argparse (exit 2), so value checks live here as
argument *types*: a bad ``--keep-last 0`` is refused before any work starts,
with argparse's ``usage:`` line and the option's name. Defaults that come
from the environment are the CLI's settings (``settings.py``), so ``--data-dir``
means the same thing (``$HERMES_HOME``) in every group. The kinds of option several groups
have (``SECONDS``, a count ``N``, ``--label KEY=VALUE``) are added here, so
each kind is checked and shown one way; so is a result's output (``emit``).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import json
import os
import signal
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Any

from hermes_runtime.cli.settings import cli_settings, http_url_problem
from hermes_runtime.common.errors import RuntimeFailure

DATA_DIR_HELP = "Hermes data dir (default: $HERMES_HOME, else /opt/data)"
Handler = Callable[[argparse.Namespace], int]


class UsageError(Exception):
    """A combination of arguments argparse cannot check by itself; the CLI exits 2."""


def add_verb(
    verbs: Any, name: str, help_text: str, handler: Handler, description: str | None = None
) -> argparse.ArgumentParser:
    """A verb with the options every verb has: ``--json`` and ``--debug``."""
    parser: argparse.ArgumentParser = verbs.add_parser(
        name, help=help_text, description=description or help_text
    )
    parser.add_argument("--json", action="store_true", help="print the result as JSON on stdout")
    parser.add_argument(
        "--debug",
        action="store_true",
        default=argparse.SUPPRESS,  # keep a top-level --debug
        help="show the traceback of a failure (also HERMES_RUNTIME_DEBUG=1)",
    )
    parser.set_defaults(handler=handler, verb_parser=parser)
    return parser


def subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    """The sub-parsers of ``parser`` by name, in ``--help`` order (for docs and tests)."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def subcommand_help(parser: argparse.ArgumentParser, name: str) -> str:
    """The one-line help ``parser --help`` shows for its sub-command ``name``."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for choice in action._choices_actions:
                if choice.dest == name:
                    return choice.help or ""
    return ""


def add_data_dir(parser: argparse.ArgumentParser, help_text: str = DATA_DIR_HELP) -> None:
    """``--data-dir``, by default the settings' (``$HERMES_HOME``, else ``/opt/data``)."""
    parser.add_argument("--data-dir", type=Path, default=cli_settings().data_dir, help=help_text)


def print_json(payload: Any) -> None:
    json.dump(payload, sys.stdout, indent=2, default=str)
    sys.stdout.write("\n")


def emit(args: argparse.Namespace, payload: Any, text: str) -> None:
    """A verb's result: ``payload`` as JSON with ``--json``, else ``text`` for people
    (nothing at all when ``text`` is empty, as an empty listing prints no line)."""
    if args.json:
        print_json(payload)
    elif text:
        print(text)


def label_arg(text: str) -> tuple[str, str]:
    key, equals, value = text.partition("=")
    if not equals or not key:
        raise argparse.ArgumentTypeError(f"--label {text!r} is not KEY=VALUE")
    return key, value


def add_labels(parser: argparse.ArgumentParser, help_text: str) -> None:
    """``--label KEY=VALUE``, repeatable; ``dict(args.label)`` is what was given."""
    parser.add_argument(
        "--label", type=label_arg, action="append", default=[], metavar="KEY=VALUE", help=help_text
    )


def capability_type(module: str, parse: str) -> Callable[[str], Any]:
    """The parser ``module.parse`` of a capability as an argument type.

    The capability is imported when a value is checked, not when the parser is
    built (``--help`` loads none). It says what is wrong with a value as a
    ``RuntimeFailure``; on the command line that is a usage error (exit 2).
    """

    def check(text: str) -> Any:
        try:
            return getattr(importlib.import_module(module), parse)(text)
        except RuntimeFailure as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    check.__name__ = parse
    return check


def require_file(path: Path, named: str) -> None:
    """A file the operator named must be one: ``RuntimeFailure`` (exit 1) naming it if not."""
    if not path.is_file():
        raise RuntimeFailure(f"{named}: {'not a file' if path.exists() else 'no such file'}")


def stop_on_signals() -> threading.Event:
    """SIGTERM/SIGINT end a long-running verb's loop cleanly (exit 0) instead of a traceback.

    The handler only writes a byte to a pipe, and a thread sets the Event. A handler that set
    the Event itself could hang the process: Python runs handlers in the main thread between
    two bytecodes, possibly while that thread holds the Event's own lock inside ``wait``.
    """
    stop = threading.Event()
    read_end, write_end = os.pipe()
    os.set_blocking(write_end, False)  # a storm of signals never blocks the handler

    def relay() -> None:
        os.read(read_end, 1)
        stop.set()

    threading.Thread(target=relay, name="stop-signal", daemon=True).start()

    def request_stop(signum: int, frame: FrameType | None) -> None:
        with contextlib.suppress(BlockingIOError):
            os.write(write_end, b"s")

    signal.signal(signal.SIGTERM, request_stop)
    signal.signal(signal.SIGINT, request_stop)
    return stop


def _number(text: str, kind: Callable[[str], float]) -> float:
    try:
        value = kind(text)
    except ValueError:
        noun = "a whole number" if kind is int else "a number"
        raise argparse.ArgumentTypeError(f"expected {noun}, got {text!r}") from None
    if value != value or value in (float("inf"), float("-inf")):  # nan, inf
        raise argparse.ArgumentTypeError(f"expected a finite number, got {text!r}")
    return value


def positive_int(text: str) -> int:
    value = int(_number(text, int))
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be 1 or more, got {value}")
    return value


def non_negative_int(text: str) -> int:
    value = int(_number(text, int))
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, got {value}")
    return value


def positive_float(text: str) -> float:
    value = _number(text, float)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be more than 0, got {text}")
    return value


def non_negative_float(text: str) -> float:
    value = _number(text, float)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, got {text}")
    return value


def port(text: str) -> int:
    value = int(_number(text, int))
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"must be a port number 0-65535, got {value}")
    return value


SECONDS = "SECONDS"  # a duration: a finite number
COUNT = "N"  # a count: a whole number
_NUMBER_TYPES: dict[str, tuple[Callable[[str], Any], Callable[[str], Any]]] = {
    # kind: (its type for "more than 0", its type for "0 or more")
    SECONDS: (positive_float, non_negative_float),
    COUNT: (positive_int, non_negative_int),
}


def add_number(
    parser: argparse.ArgumentParser,
    flag: str,
    kind: str,
    help_text: str,
    *,
    default: float | None = None,
    zero_ok: bool = False,
    required: bool = False,
) -> None:
    """A ``SECONDS`` or a count ``N`` option: more than 0, or 0 too when ``zero_ok``.

    Every duration and count of every group is added here, so each is shown as
    the same metavar and refused (exit 2) by the same check.
    """
    parser.add_argument(
        flag,
        type=_NUMBER_TYPES[kind][zero_ok],
        default=default,
        required=required,
        metavar=kind,
        help=help_text,
    )


PLUGIN_WAIT_HELP = "wait this long for git-sync's first sync of each plugin"


def add_plugin_wait(parser: argparse.ArgumentParser, help_text: str = PLUGIN_WAIT_HELP) -> None:
    """``--wait SECONDS`` (default 0) of the verbs that link plugins (``agent``, ``plugins``)."""
    add_number(parser, "--wait", SECONDS, help_text, default=0.0, zero_ok=True)


def http_url(text: str) -> str:
    """An argparse type: the URL of a server (Vault, S3, an LLM), scheme included."""
    problem = http_url_problem(text)
    if problem is not None:
        raise argparse.ArgumentTypeError(f"{text!r}: {problem}")
    return text.rstrip("/")


def add_server_url(parser: argparse.ArgumentParser, flag: str, help_text: str) -> None:
    """A server's ``URL`` option (Vault, S3, an LLM), checked by ``http_url``."""
    parser.add_argument(flag, type=http_url, metavar="URL", help=help_text)
