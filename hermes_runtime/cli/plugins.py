"""`hermes-runtime plugins`: placeholder until its capability lands."""

from __future__ import annotations

from typing import Any

from hermes_runtime.cli._shared import add_group, not_implemented

VERBS = "link watch".split()


def register(subparsers: Any) -> None:
    verbs = add_group(subparsers, "plugins", "Link git-synced plugin repositories into Hermes plugin directory.")
    for verb in VERBS:
        verbs.add_parser(verb, help="not implemented yet").set_defaults(handler=not_implemented)
