"""`hermes-runtime plugins link|watch`: argument parsing only; the work is in the package."""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
from pathlib import Path
from typing import Any

from hermes_runtime.agent import GatewayRestarter
from hermes_runtime.cli._shared import add_group, print_json
from hermes_runtime.plugins import LinkReport, link_plugins, watch

DEFAULT_DATA_DIR = "/opt/data"
DEFAULT_SPEC = "/etc/hermes-runtime/plugins.yaml"


def register(subparsers: Any) -> None:
    verbs = add_group(
        subparsers, "plugins", "Link git-synced plugin repositories into Hermes plugin directory."
    )
    link = verbs.add_parser("link", help="converge D/plugins and plugins.enabled onto the spec")
    _common(link)
    link.add_argument(
        "--wait",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="wait this long for git-sync's first sync of each plugin",
    )
    link.add_argument("--json", action="store_true", help="print the report as JSON")
    link.set_defaults(handler=run_link)

    watcher = verbs.add_parser(
        "watch", help="re-converge on spec or commit changes and restart the gateway gracefully"
    )
    _common(watcher)
    watcher.add_argument("--interval", type=float, default=1.0, metavar="SECONDS")
    watcher.add_argument("--wait", type=float, default=0.0, metavar="SECONDS")
    watcher.add_argument(
        "--max-defer",
        type=float,
        default=120.0,
        metavar="SECONDS",
        help="longest wait for the gateway to be idle before restarting it",
    )
    watcher.add_argument(
        "--no-restart", action="store_true", help="only relink; do not signal the gateway"
    )
    watcher.set_defaults(handler=run_watch)


def _common(parser: argparse.ArgumentParser) -> None:
    data_dir = os.environ.get("HERMES_HOME") or DEFAULT_DATA_DIR
    spec = os.environ.get("HERMES_RUNTIME_PLUGIN_SPEC") or DEFAULT_SPEC
    parser.add_argument(
        "--data-dir",
        type=Path,
        default=Path(data_dir),
        help=f"Hermes data dir (default: $HERMES_HOME or {DEFAULT_DATA_DIR})",
    )
    parser.add_argument(
        "--spec",
        type=Path,
        default=Path(spec),
        help=f"plugin spec (default: $HERMES_RUNTIME_PLUGIN_SPEC or {DEFAULT_SPEC})",
    )


def run_link(args: argparse.Namespace) -> int:
    report = link_plugins(args.data_dir, args.spec, wait_seconds=args.wait)
    if args.json:
        print_json(report.to_dict())
    else:
        _print_summary(report)
    return 0 if report.ok else 1


def run_watch(args: argparse.Namespace) -> int:
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    baseline = link_plugins(args.data_dir, args.spec, wait_seconds=args.wait)
    _print_summary(baseline)
    on_change = (
        _log_only
        if args.no_restart
        else GatewayRestarter(args.data_dir, max_defer_seconds=args.max_defer)
    )
    watch(args.data_dir, args.spec, on_change, stop, interval=args.interval, baseline=baseline)
    return 0


def _log_only(report: LinkReport) -> None:
    _print_summary(report)


def _print_summary(report: LinkReport) -> None:
    for result in report.results:
        detail = result.error if result.error else (result.commit or "")
        print(f"{result.status:9} {result.name} {detail}".rstrip(), file=sys.stdout)
    if report.config_changed:
        print(f"updated   plugins.enabled in {report.data_dir / 'config.yaml'}")
