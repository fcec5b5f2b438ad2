"""`hermes-runtime vault`: placeholder until its capability lands."""

from __future__ import annotations

from typing import Any

from hermes_runtime.cli._shared import add_group, not_implemented

VERBS = "render exec".split()


def register(subparsers: Any) -> None:
    verbs = add_group(subparsers, "vault", "Secrets from Vault/OpenBao into an env file or a child process.")
    for verb in VERBS:
        verbs.add_parser(verb, help="not implemented yet").set_defaults(handler=not_implemented)
