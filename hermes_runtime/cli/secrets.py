"""`hermes-runtime secrets ensure`: the chart's generated Secrets, made once in the cluster.

This module only parses arguments and calls :mod:`hermes_runtime.clustersecrets`. It takes
names, never values: the values are generated inside the command and go only to the API
server.
"""

from __future__ import annotations

import argparse
from typing import Any

from hermes_runtime.cli._shared import UsageError, add_labels, add_verb, capability_type, emit

NAME = "secrets"
HELP = "Generated Secrets, created once in the cluster (the chart's secrets Job)."


def register(verbs: Any) -> None:
    ensure = add_verb(
        verbs,
        "ensure",
        "create each Secret that does not exist yet, with a random value; never change one",
        run_ensure,
        description=(
            "Create each Secret NAME that does not exist yet in this pod's namespace, holding a "
            "random 48-character value under KEY, and mark it as made here (its uid in the "
            "hermes-runtime/owned-uid annotation). A marked Secret that exists with KEY is kept "
            "as it is (so re-rendering the chart, `helm template` or an Argo CD sync, never "
            "replaces a password). An existing Secret without the mark is refused (whoever "
            "created it may know its value) unless named with --adopt, and one without KEY is "
            "an error; every refused Secret is named and the command exits 1. Runs as the "
            "pod's ServiceAccount."
        ),
    )
    ensure.add_argument(
        "--secret",
        type=capability_type("hermes_runtime.clustersecrets", "parse_generated"),
        action="append",
        required=True,
        metavar="NAME/KEY",
        help="a Secret and the key its generated value goes under (repeatable)",
    )
    ensure.add_argument(
        "--adopt",
        action="append",
        default=[],
        metavar="NAME",
        help=(
            "a --secret NAME that may exist without the mark: the operator vouches for its "
            "value, so it is marked and kept (repeatable; the chart's secretsJob.adoptExisting)"
        ),
    )
    add_labels(ensure, "a label of each Secret created (repeatable)")


def run_ensure(args: argparse.Namespace) -> int:
    from hermes_runtime.clustersecrets import InClusterApi, ensure_secrets

    names = [secret.name for secret in args.secret]
    unknown = [name for name in args.adopt if name not in names]
    if unknown:
        raise UsageError(
            f"--adopt {unknown[0]}: not the NAME of a --secret ({', '.join(names)}); only a "
            "Secret this command would create can be adopted"
        )
    results = ensure_secrets(
        InClusterApi.from_service_account(), args.secret, dict(args.label), set(args.adopt)
    )
    emit(
        args,
        [result.as_dict() for result in results],
        "\n".join(f"{r.action} {r.name}/{r.key}" for r in results),
    )
    return 0
