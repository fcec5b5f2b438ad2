"""`hermes-runtime vault render|exec`: secrets from Vault/OpenBao, values never in argv.

This module only parses arguments and calls :mod:`hermes_runtime.vault`.
Credentials come from files or the environment (``VAULT_TOKEN``), never
from the command line.
"""

from __future__ import annotations

import argparse
import signal
import threading
from pathlib import Path
from types import FrameType
from typing import Any

from hermes_runtime.cli._shared import add_group
from hermes_runtime.common.errors import RuntimeFailure
from hermes_runtime.vault import (
    AUTH_METHODS,
    DEFAULT_JWT_FILE,
    SecretSpec,
    VaultSettings,
    exec_with_secrets,
    parse_secret_spec,
    render_once,
    run_refresh,
)


def secret_spec_arg(text: str) -> SecretSpec:
    try:
        return parse_secret_spec(text)
    except RuntimeFailure as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def positive_seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if value <= 0:
        raise argparse.ArgumentTypeError(
            f"--refresh {text!r}: expected a positive number of seconds"
        )
    return value


def add_connection_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--addr", required=True, help="Vault/OpenBao URL, e.g. https://vault.example:8200"
    )
    parser.add_argument("--auth", required=True, choices=AUTH_METHODS, help="login method")
    parser.add_argument("--role", help="Vault role (kubernetes auth)")
    parser.add_argument("--auth-path", help="auth mount path (default: the method's name)")
    parser.add_argument("--audience", help="audience the ServiceAccount token must carry")
    parser.add_argument(
        "--ca-cert", type=Path, help="PEM CA bundle to verify Vault's TLS certificate"
    )
    parser.add_argument(
        "--jwt-file",
        type=Path,
        default=DEFAULT_JWT_FILE,
        help=f"ServiceAccount token (default {DEFAULT_JWT_FILE})",
    )
    parser.add_argument("--role-id-file", type=Path, help="file holding the AppRole role id")
    parser.add_argument("--secret-id-file", type=Path, help="file holding the AppRole secret id")
    parser.add_argument(
        "--timeout", type=float, default=10.0, help="seconds per Vault request (default 10)"
    )
    parser.add_argument(
        "--secret",
        dest="secrets",
        action="append",
        required=True,
        type=secret_spec_arg,
        metavar="PATH#KEY=ENV",
        help="field KEY of secret PATH (secret/data/NAME for KV v2) as variable ENV; repeatable",
    )


def settings_from_args(parser: argparse.ArgumentParser, args: argparse.Namespace) -> VaultSettings:
    """Check option combinations (usage errors exit 2) and build the settings."""
    if args.auth == "kubernetes" and not args.role:
        parser.error("--auth kubernetes needs --role")
    if args.auth == "approle" and (args.role_id_file is None or args.secret_id_file is None):
        parser.error("--auth approle needs --role-id-file and --secret-id-file")
    return VaultSettings(
        addr=args.addr.rstrip("/"),
        auth=args.auth,
        role=args.role,
        auth_path=args.auth_path,
        audience=args.audience,
        ca_cert=args.ca_cert,
        jwt_file=args.jwt_file,
        role_id_file=args.role_id_file,
        secret_id_file=args.secret_id_file,
        timeout=args.timeout,
    )


def stop_on_signals() -> threading.Event:
    """SIGTERM/SIGINT end the refresh loop cleanly (exit 0) instead of a traceback."""
    stop = threading.Event()

    def request_stop(signum: int, frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, request_stop)
    signal.signal(signal.SIGINT, request_stop)
    return stop


def handle_render(args: argparse.Namespace) -> int:
    settings = settings_from_args(args.parser, args)
    if args.refresh is None:
        render_once(settings, args.secrets, args.out)
    else:
        run_refresh(settings, args.secrets, args.out, args.refresh, stop_on_signals())
    return 0


def handle_exec(args: argparse.Namespace) -> int:
    settings = settings_from_args(args.parser, args)
    command = list(args.command)
    if command and command[0] == "--":
        command = command[1:]
    if not command:
        args.parser.error("a command is required after '--'")
    exec_with_secrets(settings, args.secrets, command)
    return 1  # unreachable: exec_with_secrets replaces the process or raises


def register(subparsers: Any) -> None:
    verbs = add_group(
        subparsers, "vault", "Secrets from Vault/OpenBao into an env file or a child process."
    )
    render = verbs.add_parser(
        "render",
        help="write secrets to an env file (0600, atomic)",
        description="Write secrets to an env file (mode 0600, temp file + rename). "
        "With --refresh, keep running and re-render when a value changes.",
    )
    add_connection_args(render)
    render.add_argument("--out", type=Path, required=True, help="env file, on an in-memory volume")
    render.add_argument(
        "--refresh",
        type=positive_seconds,
        metavar="SECONDS",
        help="keep running, re-check every SECONDS",
    )
    render.set_defaults(handler=handle_render, parser=render)

    execute = verbs.add_parser(
        "exec",
        help="run a command with the secrets in its environment",
        description="Run CMD with the secrets added to its environment (VAULT_TOKEN removed).",
    )
    add_connection_args(execute)
    execute.add_argument(
        "command", nargs=argparse.REMAINDER, metavar="-- CMD", help="command to run"
    )
    execute.set_defaults(handler=handle_exec, parser=execute)
