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
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hermes_runtime.cli._shared import (
    SECONDS,
    UsageError,
    add_number,
    add_server_url,
    add_verb,
    capability_type,
    emit,
    stop_on_signals,
)
from hermes_runtime.cli.settings import cli_settings

if TYPE_CHECKING:
    from hermes_runtime.vault import OutputFile, VaultSettings

NAME = "vault"
HELP = "Secrets from Vault/OpenBao into an env file or a child process."


def add_connection_args(parser: argparse.ArgumentParser) -> None:
    from hermes_runtime.vault import AUTH_METHODS, DEFAULT_JWT_FILE, TOKEN_ENV

    add_server_url(
        parser,
        "--addr",
        "Vault/OpenBao URL, e.g. https://vault.example:8200 (default: $VAULT_ADDR)",
    )
    settings = cli_settings()
    token_given = settings.vault_token_given
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
    parser.add_argument(
        "--ca-cert",
        type=Path,
        default=settings.vault_ca_cert,
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
    add_number(parser, "--timeout", SECONDS, "seconds per Vault request (default 10)", default=10.0)
    parser.add_argument(
        "--secret",
        dest="secrets",
        action="append",
        required=True,
        type=capability_type("hermes_runtime.vault", "parse_secret_spec"),
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
    addr = args.addr or cli_settings().url("vault_addr")
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


def render_outputs(args: argparse.Namespace) -> list[OutputFile]:
    """``--out FILE`` (every secret) then each ``--out-only FILE=ENV,...``; at least one."""
    from hermes_runtime.vault import OutputFile

    outputs = [OutputFile(args.out)] if args.out is not None else []
    outputs += args.out_only or []
    if not outputs:
        raise UsageError("--out FILE or --out-only FILE=ENV[,ENV...] is required")
    return outputs


def handle_render(args: argparse.Namespace) -> int:
    from hermes_runtime.vault import render_files, run_refresh

    outputs = render_outputs(args)
    settings = settings_from_args(args)
    if args.refresh is not None:
        run_refresh(settings, args.secrets, outputs, args.refresh, stop_on_signals())
        return 0
    results = render_files(settings, args.secrets, outputs)
    payload = [dataclasses.asdict(result) for result in results]
    emit(
        args,
        # One object for a plain --out (as before --out-only existed), else a list.
        payload[0] if args.out_only is None else payload,
        "\n".join(
            f"{r.out}: {r.count} variable(s), {'written' if r.written else 'unchanged'}"
            for r in results
        ),
    )
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


def register(verbs: Any) -> None:
    render = add_verb(
        verbs,
        "render",
        "write secrets to an env file (0640, atomic)",
        handle_render,
        description="Write secrets to env files (mode 0640, temp file + rename): --out gets "
        "every --secret, each --out-only FILE only the variables listed for it, so one login "
        "serves several readers that must not see each other's secrets. "
        "With --refresh, keep running and re-render each file when one of its values changes.",
    )
    add_connection_args(render)
    render.add_argument(
        "--out", type=Path, help="env file with every --secret, on an in-memory volume"
    )
    render.add_argument(
        "--out-only",
        action="append",
        type=capability_type("hermes_runtime.vault", "parse_output_spec"),
        metavar="FILE=ENV[,ENV...]",
        help="env file with only these variables (names of --secret; FILE= writes an empty "
        "file); repeatable, one per reader",
    )
    add_number(
        render,
        "--refresh",
        SECONDS,
        "keep running, re-check every SECONDS (logs each render as a JSON line)",
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
