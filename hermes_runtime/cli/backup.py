"""`hermes-runtime backup`: placeholder until its capability lands."""

from __future__ import annotations

from typing import Any

from hermes_runtime.cli._shared import add_group, not_implemented

VERBS = "create list verify restore prune".split()


def register(subparsers: Any) -> None:
    verbs = add_group(subparsers, "backup", "Online SQLite-safe snapshots of the data dir: create, list, verify, restore, prune.")
    for verb in VERBS:
        verbs.add_parser(verb, help="not implemented yet").set_defaults(handler=not_implemented)
