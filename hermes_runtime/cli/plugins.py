"""`hermes-runtime plugins link|watch|install-deps`: argument parsing only; the work is in the
package.

The handlers import ``hermes_runtime.plugins`` (and the agent's restarter) when
they run, so ``--help`` and usage errors stay light.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hermes_runtime.cli._shared import (
    COUNT,
    PLUGIN_WAIT_HELP,
    SECONDS,
    add_data_dir,
    add_number,
    add_plugin_wait,
    add_server_url,
    add_verb,
    stop_on_signals,
)
from hermes_runtime.cli.settings import (
    DEFAULT_PLUGIN_SPEC,
    PLUGIN_INDEX_CA_ENV,
    PLUGIN_INDEX_URL_ENV,
    cli_settings,
)

if TYPE_CHECKING:
    from hermes_runtime.plugins import LinkReport
    from hermes_runtime.plugins.install import InstallResult

NAME = "plugins"
# A plugin's installed packages, at most (MiB): several ML libraries fit, a runaway pin does not.
DEFAULT_MAX_SIZE_MIB = 512
HELP = "Link git-synced plugin repositories into Hermes plugin directory; install their packages."


def register(verbs: Any) -> None:
    link = add_verb(verbs, "link", "converge D/plugins and plugins.enabled onto the spec", run_link)
    _common(link)

    watcher = add_verb(
        verbs,
        "watch",
        "re-converge on spec or commit changes and restart the gateway gracefully",
        run_watch,
    )
    _common(watcher)
    add_number(
        watcher, "--interval", SECONDS, "how often to look for changes (default 1)", default=1.0
    )
    add_number(
        watcher,
        "--max-defer",
        SECONDS,
        "longest wait for the gateway to be idle before restarting it",
        default=120.0,
        zero_ok=True,
    )
    watcher.add_argument(
        "--no-restart", action="store_true", help="only relink; do not signal the gateway"
    )
    _register_install_deps(verbs)


def _register_install_deps(verbs: Any) -> None:
    installer = add_verb(
        verbs,
        "install-deps",
        "install each plugin's hash-pinned requirements.txt into D/.plugin-packages",
        run_install_deps,
    )
    add_data_dir(installer)
    _spec_option(installer)
    add_server_url(
        installer,
        "--index-url",
        f"package index (PEP 503 simple URL) to install from (default: ${PLUGIN_INDEX_URL_ENV})",
    )
    installer.add_argument(
        "--index-ca",
        type=Path,
        metavar="FILE",
        default=cli_settings().plugin_index_ca,
        help="CA bundle (PEM) the index's TLS certificate is checked against, for an index "
        f"behind a private CA (default: ${PLUGIN_INDEX_CA_ENV}; unset: the system's CAs)",
    )
    installer.add_argument(
        "--watch", action="store_true", help="keep running: install again when a plugin changes"
    )
    add_number(
        installer,
        "--interval",
        SECONDS,
        "with --watch, how often to look for changes (default 5)",
        default=5.0,
    )
    add_number(
        installer,
        "--max-size-mib",
        COUNT,
        "refuse a plugin whose installed packages take more MiB than this "
        f"(default {DEFAULT_MAX_SIZE_MIB}; 0: no cap)",
        default=DEFAULT_MAX_SIZE_MIB,
        zero_ok=True,
    )


def _common(parser: argparse.ArgumentParser) -> None:
    add_data_dir(parser)
    _spec_option(parser)
    add_plugin_wait(parser, f"{PLUGIN_WAIT_HELP} (default 0)")


def _spec_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--spec",
        type=Path,
        default=cli_settings().plugin_spec,
        help=f"plugin spec (default: $HERMES_RUNTIME_PLUGIN_SPEC, else {DEFAULT_PLUGIN_SPEC})",
    )


def run_link(args: argparse.Namespace) -> int:
    from hermes_runtime.plugins import link_plugins

    report = link_plugins(args.data_dir, args.spec, wait_seconds=args.wait)
    _print_report(report, args.json)
    return 0 if report.ok else 1


def run_watch(args: argparse.Namespace) -> int:
    from hermes_runtime.agent import GatewayRestarter
    from hermes_runtime.plugins import link_plugins, watch_links

    stop = stop_on_signals()
    baseline = link_plugins(args.data_dir, args.spec, wait_seconds=args.wait)
    _print_report(baseline, args.json)
    restart = (
        None
        if args.no_restart
        else GatewayRestarter(args.data_dir, max_defer_seconds=args.max_defer)
    )

    def on_change(report: LinkReport) -> None:
        _print_report(report, args.json)
        if restart is not None:
            restart(report)

    watch_links(
        args.data_dir, args.spec, on_change, stop, interval=args.interval, baseline=baseline
    )
    return 0


def run_install_deps(args: argparse.Namespace) -> int:
    from hermes_runtime.common.logs import reporter
    from hermes_runtime.plugins import IndexSource
    from hermes_runtime.plugins.install import Installer, install_all, watch_install
    from hermes_runtime.plugins.piprun import default_python

    index_url = args.index_url or cli_settings().url("plugin_index_url")
    index = IndexSource.from_options(index_url, args.index_ca)
    with reporter("plugins.install_deps") as progress:
        installer = Installer(
            args.data_dir,
            index,
            default_python(),
            lambda message, fields: progress.step(message, **fields),
            int(args.max_size_mib) << 20 or None,
        )
        if args.watch:
            stop = stop_on_signals()
            watch_install(
                installer,
                args.spec,
                stop,
                args.interval,
                lambda results: _print_install(results, args.json),
            )
            return 0
        results = install_all(installer, args.spec)
        _print_install(results, args.json)
    return 0 if all(result.status != "failed" for result in results) else 1


def _print_install(results: list[InstallResult], as_json: bool) -> None:
    """Like ``link``: a line per plugin on stdout, each failure once on stderr, naming the
    plugin and the package; ``--json``: one line per run."""
    if as_json:
        payload = {
            "ok": all(r.status != "failed" for r in results),
            "plugins": [r.to_dict() for r in results],
        }
        print(json.dumps(payload), flush=True)
        return
    for result in results:
        if result.status == "failed":
            print(f"error: plugin {result.name}: {result.error}", file=sys.stderr)
        else:
            digest = (result.requirements_sha256 or "")[:12]
            print(f"{result.status:9} {result.name} {digest}".rstrip())
    sys.stdout.flush()


def _print_report(report: LinkReport, as_json: bool) -> None:
    """Each plugin once: results on stdout, a failure as one ``error:`` line on stderr.

    With ``--json`` the report (failures included) is the only output: one
    JSON document per convergence, on one line so ``watch`` output is JSON Lines.
    """
    if as_json:
        print(json.dumps(report.to_dict(), default=str), flush=True)
        return
    for result in report.results:
        if result.error:
            print(f"error: plugin {result.name}: {result.error}", file=sys.stderr)
        else:
            print(f"{result.status:9} {result.name} {result.commit or ''}".rstrip())
    if report.config_changed:
        print(f"updated   plugins.enabled in {report.data_dir / 'config.yaml'}")
    sys.stdout.flush()
