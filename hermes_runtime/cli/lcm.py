"""`hermes-runtime lcm`: placeholder until its capability lands."""

from __future__ import annotations

from typing import Any

from hermes_runtime.cli._shared import add_group, not_implemented

VERBS = "import context grep search expand stats doctor".split()


def register(subparsers: Any) -> None:
    verbs = add_group(subparsers, "lcm", "Lossless Context Management: import history, assemble context, search, expand.")
    for verb in VERBS:
        verbs.add_parser(verb, help="not implemented yet").set_defaults(handler=not_implemented)
