"""``hermes-runtime <group> <verb>``: parse arguments, call a capability, map errors to exit codes.

Exit codes: 0 success, 1 operational failure (``RuntimeFailure``), 2 usage
error (argparse's own convention, an unknown command included).
Each group lives in its own module with a ``register(subparsers)`` function;
handlers take the parsed namespace and return an exit code.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from hermes_runtime import __version__
from hermes_runtime.cli import agent, backup, lcm, plugins, vault
from hermes_runtime.common.errors import RuntimeFailure

EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_USAGE = 2

GROUPS = (plugins, backup, lcm, vault, agent)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="hermes-runtime",
        description="Operate long-lived Hermes agents: plugins, backups, lossless context.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    groups = parser.add_subparsers(dest="group", metavar="<group>", required=True)
    for module in GROUPS:
        module.register(groups)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    handler = getattr(args, "handler", None)
    if handler is None:
        parser.parse_args([args.group, "--help"])
        return EXIT_USAGE
    try:
        return int(handler(args))
    except RuntimeFailure as exc:
        print(f"hermes-runtime {args.group}: error: {exc}", file=sys.stderr)
        return EXIT_FAILURE
    except KeyboardInterrupt:
        print("hermes-runtime: interrupted", file=sys.stderr)
        return 130
