"""`hermes-runtime backup`: parse arguments and call ``hermes_runtime.backup``.

Each handler imports the capability itself: ``backup create --help`` or a usage
error does not load it (the CLI module docstring says why).
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hermes_runtime.cli._shared import (
    COUNT,
    SECONDS,
    UsageError,
    add_data_dir,
    add_labels,
    add_number,
    add_server_url,
    add_verb,
    capability_type,
    emit,
)
from hermes_runtime.cli.settings import cli_settings
from hermes_runtime.common.errors import RuntimeFailure

if TYPE_CHECKING:
    from hermes_runtime.backup import SnapshotInfo


def _target_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--target",
        required=True,
        metavar="URL",
        help="where snapshots live: file:///backup or s3://bucket/prefix",
    )
    parser.add_argument(
        "--agent",
        type=capability_type("hermes_runtime.backup.agents", "checked_agent"),
        metavar="NAME",
        help="whose snapshots and replicas: each agent sharing a target acts on its own only "
        "(default: $HERMES_RUNTIME_AGENT, else hermes-runtime; the chart sets "
        "<namespace>.<release>)",
    )
    add_server_url(
        parser,
        "--s3-endpoint",
        "S3 endpoint, e.g. http://minio:9000 "
        "(default: $AWS_ENDPOINT_URL_S3, $AWS_ENDPOINT_URL, else AWS itself)",
    )


def _snapshot_arg(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--snapshot",
        default="latest",
        metavar="ID|latest",
        help="which snapshot (default: the latest complete one)",
    )


def _scratch_arg(parser: argparse.ArgumentParser, what: str) -> None:
    """``--work-dir``: where the verb writes ``what``, else the system's temp dir."""
    parser.add_argument(
        "--work-dir", type=Path, help=f"scratch space for {what} (default: a temp dir)"
    )


def _exclude_arg(parser: argparse.ArgumentParser, help_text: str) -> None:
    parser.add_argument("--exclude", action="append", default=[], metavar="GLOB", help=help_text)


def _agent(args: argparse.Namespace) -> str:
    """``--agent``, else ``$HERMES_RUNTIME_AGENT`` (checked, naming the variable), else legacy."""
    if args.agent:
        return str(args.agent)
    from hermes_runtime.backup.agents import ENV, LEGACY, checked_agent

    named = cli_settings().agent
    return checked_agent(named, ENV) if named else LEGACY


def _endpoint(args: argparse.Namespace) -> str | None:
    return args.s3_endpoint or cli_settings().url("s3_endpoint_s3", "s3_endpoint")


def _target(args: argparse.Namespace) -> Any:
    from hermes_runtime.backup import open_repository

    # The password comes from restic's own variables (RESTIC_PASSWORD*): never from argv.
    return open_repository(args.target, _endpoint(args), agent=_agent(args))


NAME = "backup"
HELP = (
    "Online SQLite-safe snapshots of the data dir: create, list, verify, restore, prune; "
    "continuous replication with Litestream: replicate."
)


def register(verbs: Any) -> None:
    create = add_verb(verbs, "create", "take a snapshot of the data dir", _create)
    add_data_dir(create, "the data dir to back up (default: $HERMES_HOME, else /opt/data)")
    _target_args(create)
    _exclude_arg(create, "leave out paths matching GLOB (relative to the data dir); repeatable")
    create.add_argument(
        "--no-default-excludes", action="store_true", help="back up caches and secrets too"
    )
    _scratch_arg(create, "database snapshots")
    create.add_argument(
        "--metrics-file", type=Path, help="write Prometheus text-format figures to this file"
    )
    create.add_argument(
        "--status-file",
        type=Path,
        help="record the outcome (also a failure) as JSON for the agent's /metrics, e.g. "
        "DATA_DIR/.hermes-runtime/backup-status.json",
    )

    add_number(
        create,
        "--timeout",
        SECONDS,
        "stop restic and fail (recorded in --status-file) when the backup is not done "
        "within SECONDS: restic retries a store that stops answering for up to 15 minutes "
        "(the chart sets it below the Job's deadline, so the failure is always recorded)",
    )
    add_labels(
        create,
        "attach a label to the snapshot (repeatable), shown by `list`: e.g. the chart's "
        "pre-upgrade backup sets pre-upgrade=<release revision> (docs/backup.md)",
    )

    listing = add_verb(verbs, "list", "list the agent's complete snapshots", _list)
    _target_args(listing)
    listing.add_argument(
        "--all-agents",
        action="store_true",
        help="list every agent's snapshots in the repository, each with its agent",
    )

    verify = add_verb(verbs, "verify", "download a snapshot and check every byte", _verify)
    _target_args(verify)
    _snapshot_arg(verify)
    _scratch_arg(verify, "the trial restore")
    verify.add_argument(
        "--no-lock",
        action="store_true",
        help="read without restic's repository lock: for a read-only repository (a backup "
        "volume mounted readOnly); a prune running meanwhile is then not kept out",
    )
    verify.add_argument(
        "--no-mark",
        action="store_true",
        help="removed (restic keeps no verified marks): a usage error that names --no-lock",
    )

    restore = add_verb(verbs, "restore", "rebuild the data dir from a snapshot", _restore)
    _target_args(restore)
    _snapshot_arg(restore)
    restore.add_argument(
        "--replicas",
        metavar="URL",
        help="also read the Litestream replicas at URL, where backup replicate writes them: "
        "<target>/litestream (file:///backup/litestream, s3://bucket/prefix/litestream); each "
        "database then comes from its replica when that holds later transactions. Only with "
        "--snapshot latest. Without it no replica is read: replicas are plain files whoever "
        "can write the target may have put there",
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
    add_number(
        prune, "--keep-last", COUNT, "keep the N newest snapshots (1 or more)", required=True
    )
    for flag, periods in (("--keep-daily", "days"), ("--keep-weekly", "weeks")):
        add_number(
            prune,
            flag,
            COUNT,
            f"also keep the newest snapshot of each of the last N {periods}",
            default=0,
            zero_ok=True,
        )
    add_number(
        prune,
        "--grace-seconds",
        SECONDS,
        "kept for compatibility: restic's repository locks protect a running backup",
        default=6 * 3600,
        zero_ok=True,
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
    add_number(
        replicate_verb,
        "--sync-interval",
        SECONDS,
        "how often Litestream reads the WAL and uploads it (the RPO is about twice this)",
        default=1.0,
    )
    add_number(
        replicate_verb,
        "--rescan-seconds",
        SECONDS,
        "how often to look for new databases (Litestream restarts when the set changes)",
        default=10.0,
    )
    _exclude_arg(
        replicate_verb, "leave out databases matching GLOB, as backup create does; repeatable"
    )
    replicate_verb.add_argument(
        "--work-dir", type=Path, help="where Litestream's config file goes (default: $TMPDIR)"
    )


def _replicate(args: argparse.Namespace) -> int:
    from hermes_runtime.backup import ReplicationSettings, replica_location, replicate

    settings = ReplicationSettings(args.sync_interval, args.rescan_seconds, tuple(args.exclude))
    location = replica_location(args.target, _endpoint(args), agent=_agent(args))
    replicate(args.data_dir, location, settings=settings, work_dir=args.work_dir)
    return 0


def _create(args: argparse.Namespace) -> int:
    from hermes_runtime.backup import create_backup, record_backup_outcome, write_backup_metrics

    started_at = time.time()
    try:
        summary = create_backup(
            args.data_dir,
            _target(args).with_time_limit(args.timeout),
            excludes=tuple(args.exclude),
            default_excludes=not args.no_default_excludes,
            work_dir=args.work_dir,
            labels=dict(args.label),
        )
    except Exception as exc:
        if args.metrics_file:
            write_backup_metrics(args.metrics_file, None)
        if args.status_file:
            _record_outcome(
                record_backup_outcome,
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
        _record_outcome(
            record_backup_outcome, args.status_file, started_at=started_at, summary=summary
        )
    emit(args, dataclasses.asdict(summary), summary.id)
    return 0


def _record_outcome(record: Any, path: Path, **outcome: Any) -> None:
    """Write the status record; one that cannot be written is said, never fatal.

    The record feeds the agent's ``/metrics``; the snapshot is what matters. A record folder
    the backup's UID may not write yet (a volume the previous agent made, before the first
    start of this one widens it) must not fail the pre-upgrade backup it describes.
    """
    from hermes_runtime.common.logs import log_event

    try:
        record(path, **outcome)
    except RuntimeFailure as exc:
        log_event("backup.status.not_written", level="warning", path=str(path), error=str(exc))


def _list(args: argparse.Namespace) -> int:
    from hermes_runtime.backup import repository_listing

    repo = _target(args)
    listing = repository_listing(repo)
    entries = listing.entries if args.all_agents else listing.own
    infos = [entry.info for entry in entries]
    lines = [_snapshot_line(info, args.all_agents) for info in infos]
    others = {} if args.all_agents else listing.others
    if others:  # said on stderr: stdout stays the agent's snapshots, one a line
        counts = ", ".join(f"{agent} ({count})" for agent, count in others.items())
        print(
            f"note: {repo.url} is shared: it also holds snapshots of {counts}; "
            "list them with --all-agents",
            file=sys.stderr,
        )
    emit(args, [dataclasses.asdict(i) for i in infos], "\n".join(lines))
    return 0


def _snapshot_line(info: SnapshotInfo, with_agent: bool) -> str:
    labels = "".join(f"  {key}={value}" for key, value in sorted(info.labels.items()))
    agent = f"  agent={info.agent}" if with_agent else ""
    return (
        f"{info.id}  {info.created_at}  {info.files:>6} files  {info.databases:>3} db  "
        f"{info.bytes:>14} B  {info.status}{agent}{labels}"
    )


def _verify(args: argparse.Namespace) -> int:
    from hermes_runtime.backup import verify_snapshot

    if args.no_mark:
        raise UsageError(
            "--no-mark is gone: restic keeps no verified marks. To read without restic's "
            "repository lock (a read-only repository), pass --no-lock"
        )
    report = verify_snapshot(
        _target(args), args.snapshot, scratch=args.work_dir, lock=not args.no_lock
    )
    lock = "" if report.locked else " (without restic's repository lock)"
    text = (
        f"snapshot {report.snapshot}: ok: restic read back every pack{lock}; "
        f"{report.files} files and {report.databases} databases restored to scratch, "
        "each database matched its recorded SHA-256 and passed integrity_check"
    )
    emit(args, dataclasses.asdict(report), text)
    return 0


def _restore(args: argparse.Namespace) -> int:
    from hermes_runtime.backup import (
        RestoreReport,
        data_dir_has_data,
        replicas_location,
        restore_snapshot,
    )

    if args.replicas is not None and args.snapshot != "latest":
        raise UsageError(
            "--replicas goes with --snapshot latest: a named snapshot is restored as is"
        )
    replicas = None
    if args.replicas is not None:
        endpoint = _endpoint(args)  # a bad variable is no usage error: it fails naming itself
        try:
            replicas = replicas_location(args.replicas, endpoint, agent=_agent(args))
        except RuntimeFailure as exc:
            raise UsageError(str(exc)) from exc
    if args.data_dir.exists() and not args.data_dir.is_dir():
        raise RuntimeFailure(f"--data-dir {args.data_dir}: not a directory")
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
            replicas=replicas,
        )
    if report.restored:
        lines = [f"restored snapshot {report.snapshot or '(none)'} into {report.data_dir}"]
        lines += [
            f"  {path}: {source['source']} {source['ref']} ({source['at']})"
            for path, source in report.sources.items()
        ]
    else:
        lines = [f"nothing restored: {report.data_dir}: {report.reason}"]
    emit(args, dataclasses.asdict(report), "\n".join(lines))
    return 0


def _prune(args: argparse.Namespace) -> int:
    from hermes_runtime.backup import PrunePolicy, prune_snapshots

    policy = PrunePolicy(args.keep_last, args.keep_daily, args.keep_weekly)
    report = prune_snapshots(_target(args), policy, dry_run=args.dry_run)
    verb = "would delete" if report.dry_run else "deleted"
    text = f"kept {len(report.kept)} snapshot(s), {verb} {len(report.deleted)}"
    emit(args, dataclasses.asdict(report), text)
    return 0
