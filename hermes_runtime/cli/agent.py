"""`hermes-runtime agent prepare|run|pre-stop`: the agent image's entrypoint and its preStop hook.

Every option defaults to the environment variable the chart sets (see
``AgentSettings.from_environ``), so the image's ``CMD`` is just ``hermes-runtime agent run``.
This module only parses arguments and calls :mod:`hermes_runtime.agent`, which its
handlers import when they run (``--help`` and usage errors do not load it).
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hermes_runtime.cli._shared import (
    DATA_DIR_HELP,
    SECONDS,
    add_number,
    add_plugin_wait,
    add_verb,
    emit,
    port,
    print_json,
    require_file,
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
    add_plugin_wait(parser)


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
    return AgentSettings.from_environ(os.environ).model_copy(update=given)


def _check_given_files(args: argparse.Namespace) -> None:
    """A seed or spec named on the command line must exist.

    The image's environment names seeds that the chart may not mount, so a
    missing file from the environment means "no seed"; one typed by an
    operator is a mistake to report.
    """
    for option in ("--spec", "--seed-config", "--seed-soul"):
        path = getattr(args, option[2:].replace("-", "_"), None)
        if path is not None:
            require_file(path, f"{option} {path}")


def handle_prepare(args: argparse.Namespace) -> int:
    _check_given_files(args)
    from hermes_runtime.agent import prepare  # after the check: a typo costs no import

    report = prepare(_settings(args))
    if args.json:  # else the report is in the log lines prepare writes
        print_json(report.as_dict())
    return 0 if report.ok or not args.strict else 1


def handle_run(args: argparse.Namespace) -> int:
    _check_given_files(args)
    from hermes_runtime.agent import run_agent

    return run_agent(_settings(args))


def handle_pre_stop(args: argparse.Namespace) -> int:
    """The container's preStop hook: ask the running entrypoint for the hand-over and wait.

    Exit 0 also when no entrypoint listens: there is nothing to hand over, and the kubelet's
    SIGTERM, which follows the hook whatever it returns, stops the pod."""
    from hermes_runtime.agent import ANSWER_MARGIN_SECONDS, PRE_STOP, AgentSettings, ask_entrypoint

    settings = AgentSettings.from_environ(os.environ)
    socket = args.socket or settings.control_socket
    timeout = args.timeout
    if timeout is None:
        timeout = settings.handover_seconds + ANSWER_MARGIN_SECONDS
    answer = ask_entrypoint(socket, PRE_STOP, timeout)
    if answer is None:
        answer = {"stopping": False, "reached": False, "socket": str(socket)}
        text = (
            f"pre-stop: no entrypoint listens on {socket} (not running, or still waiting for "
            "the data volume): nothing to hand over; SIGTERM stops the pod"
        )
    elif "error" in answer:
        raise RuntimeFailure(f"pre-stop: the entrypoint on {socket} answered: {answer['error']}")
    else:
        successor = "a warm successor waits" if answer.get("successor") else "no successor"
        text = f"pre-stop: stopping, {successor} (waited {answer.get('waited_seconds')} s)"
    emit(args, answer, text)
    return 0


def register(verbs: Any) -> None:
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
    add_number(
        run,
        "--stop-timeout",
        SECONDS,
        "seconds from SIGTERM until the gateway is killed (default: "
        "$HERMES_RUNTIME_TERMINATION_GRACE_SECONDS - $HERMES_RUNTIME_HANDOVER_SECONDS - "
        "$HERMES_RUNTIME_PRESTOP_SECONDS - 2)",
        zero_ok=True,
    )

    hook = add_verb(
        verbs,
        "pre-stop",
        "the agent container's preStop hook: hand over, then let SIGTERM come",
        handle_pre_stop,
        description="Ask the running entrypoint (over its control socket, reachable only from "
        "inside the agent container) to stop: it waits, still serving, for a warm successor "
        "pod (at most $HERMES_RUNTIME_HANDOVER_SECONDS), then turns unready. Exits 0 when it "
        "answered, and also when no entrypoint listens (nothing to hand over).",
    )
    hook.add_argument(
        "--socket",
        type=Path,
        help="the entrypoint's control socket ($HERMES_RUNTIME_CONTROL_SOCKET, "
        "/run/hermes-runtime/agent.sock)",
    )
    add_number(
        hook,
        "--timeout",
        SECONDS,
        "how long to wait for the answer (default: $HERMES_RUNTIME_HANDOVER_SECONDS + 30)",
        zero_ok=True,
    )
