"""`hermes-runtime backup`: parse arguments and call ``hermes_runtime.backup``.

Each handler imports the capability itself: ``backup create --help`` or a usage
error does not load it (the CLI module docstring says why).
"""

from __future__ import annotations

import argparse
import dataclasses
import time
from pathlib import Path
from typing import Any

from hermes_runtime.cli._shared import (
    add_data_dir,
    add_group,
    add_verb,
    env_url,
    http_url,
    non_negative_float,
    non_negative_int,
    positive_float,
    positive_int,
    print_json,
)
from hermes_runtime.common.errors import RuntimeFailure


def _target_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--target",
        required=True,
        metavar="URL",
        help="where snapshots live: file:///backup or s3://bucket/prefix",
    )
    parser.add_argument(
        "--s3-endpoint",
        type=http_url,
        metavar="URL",
        help="S3 endpoint, e.g. http://minio:9000 "
        "(default: $AWS_ENDPOINT_URL_S3, $AWS_ENDPOINT_URL, else AWS itself)",
    )


def _snapshot_arg(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--snapshot",
        default="latest",
        metavar="ID|latest",
        help="which snapshot (default: the latest complete one)",
    )


def _endpoint(args: argparse.Namespace) -> str | None:
    return args.s3_endpoint or env_url("AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL")


def _target(args: argparse.Namespace) -> Any:
    from hermes_runtime.backup import open_repository

    # The password comes from restic's own variables (RESTIC_PASSWORD*): never from argv.
    return open_repository(args.target, _endpoint(args))


NAME = "backup"
HELP = (
    "Online SQLite-safe snapshots of the data dir: create, list, verify, restore, prune; "
    "continuous replication with Litestream: replicate."
)


def register(subparsers: Any) -> None:
    verbs = add_group(subparsers, NAME, HELP)
    create = add_verb(verbs, "create", "take a snapshot of the data dir", _create)
    add_data_dir(create, "the data dir to back up (default: $HERMES_HOME, else /opt/data)")
    _target_args(create)
    create.add_argument(
        "--exclude",
        action="append",
        default=[],
        metavar="GLOB",
        help="leave out paths matching GLOB (relative to the data dir); repeatable",
    )
    create.add_argument(
        "--no-default-excludes", action="store_true", help="back up caches and secrets too"
    )
    create.add_argument(
        "--work-dir", type=Path, help="scratch space for database snapshots (default: a temp dir)"
    )
    create.add_argument(
        "--metrics-file", type=Path, help="write Prometheus text-format figures to this file"
    )
    create.add_argument(
        "--status-file",
        type=Path,
        help="record the outcome (also a failure) as JSON for the agent's /metrics, e.g. "
        "DATA_DIR/.hermes-runtime/backup-status.json",
    )

    listing = add_verb(verbs, "list", "list complete snapshots", _list)
    _target_args(listing)

    verify = add_verb(verbs, "verify", "download a snapshot and check every byte", _verify)
    _target_args(verify)
    _snapshot_arg(verify)
    verify.add_argument(
        "--work-dir", type=Path, help="scratch space for the trial restore (default: a temp dir)"
    )
    verify.add_argument(
        "--no-mark",
        action="store_true",
        help="read without a repository lock (a read-only repository); restic keeps no marks",
    )

    restore = add_verb(verbs, "restore", "rebuild the data dir from a snapshot", _restore)
    _target_args(restore)
    restore.add_argument(
        "--snapshot",
        default="latest",
        metavar="ID|latest",
        help="which snapshot (default: latest; with latest, each database comes from its "
        "Litestream replica instead when that is newer)",
    )
    add_data_dir(restore, "the data dir to rebuild (default: $HERMES_HOME, else /opt/data)")
    when = restore.add_mutually_exclusive_group()
    when.add_argument("--force", action="store_true", help="replace a non-empty data dir")
    when.add_argument(
        "--if-empty", action="store_true", help="do nothing (exit 0) if the data dir holds data"
    )

    _register_replicate(verbs)

    prune = add_verb(
        verbs,
        "prune",
        "forget old snapshots and prune unreferenced data (restic forget --prune)",
        _prune,
    )
    _target_args(prune)
    prune.add_argument(
        "--keep-last",
        type=positive_int,
        required=True,
        metavar="N",
        help="keep the N newest snapshots (1 or more)",
    )
    prune.add_argument(
        "--keep-daily",
        type=non_negative_int,
        default=0,
        metavar="N",
        help="also keep the newest snapshot of each of the last N days",
    )
    prune.add_argument(
        "--keep-weekly",
        type=non_negative_int,
        default=0,
        metavar="N",
        help="also keep the newest snapshot of each of the last N weeks",
    )
    prune.add_argument(
        "--grace-seconds",
        type=non_negative_float,
        default=6 * 3600,
        metavar="SECONDS",
        help="kept for compatibility: restic's repository locks protect a running backup",
    )
    prune.add_argument(
        "--dry-run", action="store_true", help="report what would be deleted, delete nothing"
    )


def _register_replicate(verbs: Any) -> None:
    replicate_verb = add_verb(
        verbs,
        "replicate",
        "replicate every SQLite database continuously with Litestream (runs until stopped)",
        _replicate,
    )
    add_data_dir(replicate_verb, "the data dir to replicate (default: $HERMES_HOME)")
    _target_args(replicate_verb)
    replicate_verb.add_argument(
        "--sync-interval",
        type=positive_float,
        default=1.0,
        metavar="SECONDS",
        help="how often Litestream reads the WAL and uploads it (the RPO is about twice this)",
    )
    replicate_verb.add_argument(
        "--rescan-seconds",
        type=positive_float,
        default=10.0,
        metavar="SECONDS",
        help="how often to look for new databases (Litestream restarts when the set changes)",
    )
    replicate_verb.add_argument(
        "--exclude",
        action="append",
        default=[],
        metavar="GLOB",
        help="leave out databases matching GLOB, as backup create does; repeatable",
    )
    replicate_verb.add_argument(
        "--work-dir", type=Path, help="where Litestream's config file goes (default: $TMPDIR)"
    )


def _replicate(args: argparse.Namespace) -> int:
    from hermes_runtime.backup import ReplicationSettings, replica_location, replicate

    settings = ReplicationSettings(args.sync_interval, args.rescan_seconds, tuple(args.exclude))
    location = replica_location(args.target, _endpoint(args))
    replicate(args.data_dir, location, settings=settings, work_dir=args.work_dir)
    return 0


def _create(args: argparse.Namespace) -> int:
    from hermes_runtime.backup import create_backup, record_backup_outcome, write_backup_metrics

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
    from hermes_runtime.backup import list_snapshots

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
    from hermes_runtime.backup import verify_snapshot

    report = verify_snapshot(
        _target(args), args.snapshot, scratch=args.work_dir, lock=not args.no_mark
    )
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
    from hermes_runtime.backup import (
        RestoreReport,
        data_dir_has_data,
        replica_location,
        restore_snapshot,
    )

    if args.data_dir.exists() and not args.data_dir.is_dir():
        raise RuntimeFailure(f"--data-dir {args.data_dir}: not a directory")
    if args.if_empty and data_dir_has_data(args.data_dir):
        # A restarted pod: do not even contact the target (it may be down).
        report = RestoreReport(None, str(args.data_dir), False, "data dir already holds data")
    else:
        latest = args.snapshot == "latest"
        report = restore_snapshot(
            _target(args),
            args.data_dir,
            snapshot=args.snapshot,
            force=args.force,
            if_empty=args.if_empty,
            replicas=replica_location(args.target, _endpoint(args)) if latest else None,
        )
    if args.json:
        print_json(dataclasses.asdict(report))
    elif report.restored:
        print(f"restored snapshot {report.snapshot or '(none)'} into {report.data_dir}")
        for path, source in report.sources.items():
            print(f"  {path}: {source['source']} {source['ref']} ({source['at']})")
    else:
        print(f"nothing restored: {report.data_dir}: {report.reason}")
    return 0


def _prune(args: argparse.Namespace) -> int:
    from hermes_runtime.backup import PrunePolicy, prune_snapshots

    policy = PrunePolicy(args.keep_last, args.keep_daily, args.keep_weekly)
    report = prune_snapshots(_target(args), policy, dry_run=args.dry_run)
    if args.json:
        print_json(dataclasses.asdict(report))
    else:
        verb = "would delete" if report.dry_run else "deleted"
        print(
            f"kept {len(report.kept)} snapshot(s), {verb} {len(report.deleted)}, "
            f"{report.blobs_deleted} blob(s), {report.bytes_freed} bytes"
        )
    return 0
