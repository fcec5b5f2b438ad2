"""`hermes-runtime vault render|exec`: secrets from Vault/OpenBao, values never in argv.

This module only parses arguments and calls :mod:`hermes_runtime.vault`.
Credentials come from files or the environment (``VAULT_TOKEN``), never
from the command line. The options need the capability's names (auth methods,
the token variable), so it is imported when this group's parser is built: only
for a ``vault`` command, never for another group's.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import signal
import threading
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any

from hermes_runtime.cli._shared import (
    UsageError,
    add_group,
    add_verb,
    env_url,
    http_url,
    positive_float,
    print_json,
)
from hermes_runtime.common.errors import RuntimeFailure

if TYPE_CHECKING:
    from hermes_runtime.vault import SecretSpec, VaultSettings

NAME = "vault"
HELP = "Secrets from Vault/OpenBao into an env file or a child process."


def secret_spec_arg(text: str) -> SecretSpec:
    from hermes_runtime.vault import parse_secret_spec

    try:
        return parse_secret_spec(text)
    except RuntimeFailure as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def add_connection_args(parser: argparse.ArgumentParser) -> None:
    from hermes_runtime.vault import AUTH_METHODS, DEFAULT_JWT_FILE, TOKEN_ENV

    parser.add_argument(
        "--addr",
        type=http_url,
        metavar="URL",
        help="Vault/OpenBao URL, e.g. https://vault.example:8200 (default: $VAULT_ADDR)",
    )
    token_given = bool(os.environ.get(TOKEN_ENV, "").strip())
    parser.add_argument(
        "--auth",
        choices=AUTH_METHODS,
        default="token" if token_given else None,
        required=not token_given,
        help=f"login method; token reads ${TOKEN_ENV} (default: token when ${TOKEN_ENV} is set)",
    )
    parser.add_argument("--role", help="Vault role (kubernetes auth)")
    parser.add_argument("--auth-path", help="auth mount path (default: the method's name)")
    parser.add_argument("--audience", help="audience the ServiceAccount token must carry")
    ca_cert = os.environ.get("VAULT_CACERT", "").strip()
    parser.add_argument(
        "--ca-cert",
        type=Path,
        default=Path(ca_cert) if ca_cert else None,
        help="PEM CA bundle to verify Vault's TLS certificate (default: $VAULT_CACERT)",
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
        "--timeout",
        type=positive_float,
        default=10.0,
        metavar="SECONDS",
        help="seconds per Vault request (default 10)",
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


def settings_from_args(args: argparse.Namespace) -> VaultSettings:
    """Check option combinations (usage errors exit 2) and build the settings."""
    from hermes_runtime.vault import VaultSettings

    if args.auth == "kubernetes" and not args.role:
        raise UsageError("--auth kubernetes needs --role")
    if args.auth == "approle" and (args.role_id_file is None or args.secret_id_file is None):
        raise UsageError("--auth approle needs --role-id-file and --secret-id-file")
    addr = args.addr or env_url("VAULT_ADDR")
    if addr is None:
        raise UsageError("--addr is required (or set VAULT_ADDR)")
    return VaultSettings(
        addr=addr,
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
    from hermes_runtime.vault import render_once, run_refresh

    settings = settings_from_args(args)
    if args.refresh is not None:
        run_refresh(settings, args.secrets, args.out, args.refresh, stop_on_signals())
        return 0
    result = render_once(settings, args.secrets, args.out)
    if args.json:
        print_json(dataclasses.asdict(result))
    else:
        state = "written" if result.written else "unchanged"
        print(f"{result.out}: {result.count} variable(s), {state}")
    return 0


def handle_exec(args: argparse.Namespace) -> int:
    from hermes_runtime.vault import exec_with_secrets

    command = list(args.command)
    if command and command[0] == "--":
        command = command[1:]
    if not command:
        raise UsageError("a command is required after '--'")
    settings = settings_from_args(args)
    exec_with_secrets(settings, args.secrets, command)
    return 1  # unreachable: exec_with_secrets replaces the process or raises


def register(subparsers: Any) -> None:
    verbs = add_group(subparsers, NAME, HELP)
    render = add_verb(
        verbs,
        "render",
        "write secrets to an env file (0600, atomic)",
        handle_render,
        description="Write secrets to an env file (mode 0600, temp file + rename). "
        "With --refresh, keep running and re-render when a value changes.",
    )
    add_connection_args(render)
    render.add_argument("--out", type=Path, required=True, help="env file, on an in-memory volume")
    render.add_argument(
        "--refresh",
        type=positive_float,
        metavar="SECONDS",
        help="keep running, re-check every SECONDS (logs each render as a JSON line)",
    )

    execute = add_verb(
        verbs,
        "exec",
        "run a command with the secrets in its environment",
        handle_exec,
        description="Run CMD with the secrets added to its environment (VAULT_TOKEN removed). "
        "On success the output is CMD's own; --json is accepted for uniformity.",
    )
    add_connection_args(execute)
    execute.add_argument(
        "command", nargs=argparse.REMAINDER, metavar="-- CMD", help="command to run"
    )
