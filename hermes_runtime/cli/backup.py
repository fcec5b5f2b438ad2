"""`hermes-runtime backup`: parse arguments and call ``hermes_runtime.backup``."""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import time
from pathlib import Path
from typing import Any

from hermes_runtime.backup import (
    ENCRYPTION_KEY_ENV,
    PrunePolicy,
    RestoreReport,
    create_backup,
    data_dir_has_data,
    list_snapshots,
    open_target,
    prune_snapshots,
    record_backup_outcome,
    restore_snapshot,
    verify_snapshot,
    write_backup_metrics,
)
from hermes_runtime.cli._shared import add_group, print_json


def _target_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--target", required=True, help="file:///backup or s3://bucket/prefix")
    parser.add_argument(
        "--s3-endpoint", help="S3 endpoint URL (default: AWS_ENDPOINT_URL, else AWS itself)"
    )


def _target(args: argparse.Namespace) -> Any:
    secret = os.environ.get(ENCRYPTION_KEY_ENV) or None  # from the env only: never in argv
    return open_target(args.target, args.s3_endpoint, secret)


def register(subparsers: Any) -> None:
    verbs = add_group(
        subparsers,
        "backup",
        "Online SQLite-safe snapshots of the data dir: create, list, verify, restore, prune.",
    )
    create = verbs.add_parser("create", help="take a snapshot of the data dir")
    create.add_argument("--data-dir", type=Path, required=True)
    _target_args(create)
    create.add_argument("--exclude", action="append", default=[], metavar="GLOB")
    create.add_argument(
        "--no-default-excludes", action="store_true", help="back up caches and secrets too"
    )
    create.add_argument("--work-dir", type=Path, help="scratch space for database snapshots")
    create.add_argument("--metrics-file", type=Path, help="write Prometheus text-format figures")
    create.add_argument(
        "--status-file",
        type=Path,
        help="record the outcome (also a failure) as JSON for the agent's /metrics, e.g. "
        "DATA_DIR/.hermes-runtime/backup-status.json",
    )
    create.add_argument("--json", action="store_true")
    create.set_defaults(handler=_create)

    listing = verbs.add_parser("list", help="list complete snapshots")
    _target_args(listing)
    listing.add_argument("--json", action="store_true")
    listing.set_defaults(handler=_list)

    verify = verbs.add_parser("verify", help="download a snapshot and check every byte")
    _target_args(verify)
    verify.add_argument("--snapshot", default="latest", metavar="ID|latest")
    verify.add_argument(
        "--no-mark",
        action="store_true",
        help="do not record verified/<id>.json in the target (e.g. a read-only target)",
    )
    verify.add_argument("--json", action="store_true")
    verify.set_defaults(handler=_verify)

    restore = verbs.add_parser("restore", help="rebuild the data dir from a snapshot")
    _target_args(restore)
    restore.add_argument("--snapshot", default="latest", metavar="ID|latest")
    restore.add_argument("--data-dir", type=Path, required=True)
    restore.add_argument("--force", action="store_true", help="replace a non-empty data dir")
    restore.add_argument(
        "--if-empty", action="store_true", help="do nothing (exit 0) if the data dir holds data"
    )
    restore.add_argument("--json", action="store_true")
    restore.set_defaults(handler=_restore)

    prune = verbs.add_parser("prune", help="delete old snapshots and unreferenced blobs")
    _target_args(prune)
    prune.add_argument("--keep-last", type=int, required=True, metavar="N")
    prune.add_argument("--keep-daily", type=int, default=0, metavar="N")
    prune.add_argument("--keep-weekly", type=int, default=0, metavar="N")
    prune.add_argument(
        "--grace-seconds",
        type=float,
        default=6 * 3600,
        help="never delete unreferenced blobs younger than this (a backup may be uploading)",
    )
    prune.add_argument("--dry-run", action="store_true")
    prune.add_argument("--json", action="store_true")
    prune.set_defaults(handler=_prune)


def _create(args: argparse.Namespace) -> int:
    started_at = time.time()
    try:
        summary = create_backup(
            args.data_dir,
            _target(args),
            excludes=tuple(args.exclude),
            default_excludes=not args.no_default_excludes,
            work_dir=args.work_dir,
        )
    except Exception as exc:
        if args.metrics_file:
            write_backup_metrics(args.metrics_file, None)
        if args.status_file:
            record_backup_outcome(
                args.status_file,
                started_at=started_at,
                summary=None,
                error=str(exc) or type(exc).__name__,
                target=args.target,
            )
        raise
    if args.metrics_file:
        write_backup_metrics(args.metrics_file, summary)
    if args.status_file:
        record_backup_outcome(args.status_file, started_at=started_at, summary=summary)
    if args.json:
        print_json(dataclasses.asdict(summary))
    else:
        print(summary.id)
    return 0


def _list(args: argparse.Namespace) -> int:
    infos = list_snapshots(_target(args))
    if args.json:
        print_json([dataclasses.asdict(i) for i in infos])
        return 0
    for info in infos:
        mark = "verified" if info.verified else ""
        print(
            f"{info.id}  {info.files:>6} files  {info.databases:>3} db  "
            f"{info.bytes:>14} B  {info.status} {mark}"
        )
    return 0


def _verify(args: argparse.Namespace) -> int:
    report = verify_snapshot(_target(args), args.snapshot, mark=not args.no_mark)
    if args.json:
        print_json(dataclasses.asdict(report))
    else:
        unmarked = "" if report.marked else "; verified mark not written"
        print(
            f"snapshot {report.snapshot}: ok ({report.files} files, "
            f"{report.databases} databases{unmarked})"
        )
    return 0


def _restore(args: argparse.Namespace) -> int:
    if args.force and args.if_empty:
        print(
            "hermes-runtime backup restore: --force and --if-empty exclude each other",
            file=sys.stderr,
        )
        return 2
    if args.if_empty and data_dir_has_data(args.data_dir):
        # A restarted pod: do not even contact the target (it may be down).
        report = RestoreReport(None, str(args.data_dir), False, "data dir already holds data")
    else:
        report = restore_snapshot(
            _target(args),
            args.data_dir,
            snapshot=args.snapshot,
            force=args.force,
            if_empty=args.if_empty,
        )
    if args.json:
        print_json(dataclasses.asdict(report))
    elif report.restored:
        print(f"restored snapshot {report.snapshot} into {report.data_dir}")
    else:
        print(f"nothing restored: {report.data_dir}: {report.reason}")
    return 0


def _prune(args: argparse.Namespace) -> int:
    policy = PrunePolicy(args.keep_last, args.keep_daily, args.keep_weekly)
    report = prune_snapshots(
        _target(args), policy, grace_seconds=args.grace_seconds, dry_run=args.dry_run
    )
    if args.json:
        print_json(dataclasses.asdict(report))
    else:
        verb = "would delete" if report.dry_run else "deleted"
        print(
            f"kept {len(report.kept)} snapshot(s), {verb} {len(report.deleted)}, "
            f"{report.blobs_deleted} blob(s), {report.bytes_freed} bytes"
        )
    return 0
