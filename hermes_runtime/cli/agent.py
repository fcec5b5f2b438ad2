"""`hermes-runtime agent prepare|run`: the agent image's entrypoint.

Every option defaults to the environment variable the chart sets (see
``AgentSettings.from_env``), so the image's ``CMD`` is just ``hermes-runtime agent run``.
This module only parses arguments and calls :mod:`hermes_runtime.agent`, which its
handlers import when they run (``--help`` and usage errors do not load it).
"""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hermes_runtime.cli._shared import (
    DATA_DIR_HELP,
    add_group,
    add_verb,
    non_negative_float,
    port,
    print_json,
)
from hermes_runtime.common.errors import RuntimeFailure

if TYPE_CHECKING:
    from hermes_runtime.agent import AgentSettings

NAME = "agent"
HELP = "The agent image's entrypoint: seed, link, run Hermes."


def _add_common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--data-dir", type=Path, help=DATA_DIR_HELP)
    parser.add_argument(
        "--spec", type=Path, help="plugin spec, plugins.yaml ($HERMES_RUNTIME_PLUGIN_SPEC)"
    )
    parser.add_argument(
        "--seed-config", type=Path, help="config seed ($HERMES_RUNTIME_SEED_CONFIG)"
    )
    parser.add_argument("--seed-soul", type=Path, help="SOUL.md seed ($HERMES_RUNTIME_SEED_SOUL)")
    parser.add_argument(
        "--wait",
        type=non_negative_float,
        default=0.0,
        metavar="SECONDS",
        help="wait this long for git-sync's first sync of each plugin",
    )


def _settings(args: argparse.Namespace) -> AgentSettings:
    """Environment defaults, overridden by whichever options were given."""
    from hermes_runtime.agent import AgentSettings

    overrides: dict[str, Any] = {
        "data_dir": args.data_dir,
        "plugin_spec": args.spec,
        "seed_config": args.seed_config,
        "seed_soul": args.seed_soul,
        "plugin_wait_seconds": args.wait,
        "secrets_env": getattr(args, "secrets_env", None),
        "metrics_port": getattr(args, "metrics_port", None),
        "api_port": getattr(args, "api_port", None),
        "stop_timeout": getattr(args, "stop_timeout", None),
    }
    given = {key: value for key, value in overrides.items() if value is not None}
    return dataclasses.replace(AgentSettings.from_env(), **given)


def _check_given_files(args: argparse.Namespace) -> None:
    """A seed or spec named on the command line must exist.

    The image's environment names seeds that the chart may not mount, so a
    missing file from the environment means "no seed"; one typed by an
    operator is a mistake to report.
    """
    for option in ("--spec", "--seed-config", "--seed-soul"):
        path = getattr(args, option[2:].replace("-", "_"), None)
        if path is not None and not path.is_file():
            problem = "no such file" if not path.exists() else "not a file"
            raise RuntimeFailure(f"{option} {path}: {problem}")


def handle_prepare(args: argparse.Namespace) -> int:
    _check_given_files(args)
    from hermes_runtime.agent import prepare  # after the check: a typo costs no import

    report = prepare(_settings(args))
    if args.json:
        print_json(report.as_dict())
    return 0 if report.ok or not args.strict else 1


def handle_run(args: argparse.Namespace) -> int:
    _check_given_files(args)
    from hermes_runtime.agent import run_agent

    return run_agent(_settings(args))


def register(subparsers: Any) -> None:
    verbs = add_group(subparsers, NAME, HELP)
    prep = add_verb(
        verbs,
        "prepare",
        "seed config.yaml/SOUL.md (keeping user edits) and link plugins",
        handle_prepare,
    )
    _add_common(prep)
    prep.add_argument("--strict", action="store_true", help="exit 1 when a plugin fails to link")

    run = add_verb(
        verbs,
        "run",
        "prepare, then run the Hermes gateway (API server) in the foreground",
        handle_run,
        description="Prepare, then run the Hermes gateway in the foreground until SIGTERM. "
        "Its output is the gateway's and JSON log lines; --json is accepted for uniformity.",
    )
    _add_common(run)
    run.add_argument(
        "--secrets-env", type=Path, help="env file for the gateway ($HERMES_RUNTIME_SECRETS_ENV)"
    )
    run.add_argument(
        "--metrics-port",
        type=port,
        help="Prometheus port, 0 disables ($HERMES_RUNTIME_METRICS_PORT, 9090)",
    )
    run.add_argument(
        "--api-port", type=port, help="Hermes API server port ($API_SERVER_PORT, 8642)"
    )
    run.add_argument(
        "--stop-timeout",
        type=non_negative_float,
        metavar="SECONDS",
        help="seconds from SIGTERM until the gateway is killed (default: "
        "$HERMES_RUNTIME_TERMINATION_GRACE_SECONDS - $HERMES_RUNTIME_HANDOVER_SECONDS - "
        "$HERMES_RUNTIME_PRESTOP_SECONDS - 2)",
    )
