"""create / list / verify / restore / prune on a restic repository.

Our part, which restic cannot do: find every SQLite database by its header, take
a one-step online snapshot of each, run ``integrity_check``, count rows, apply the
excludes. Then restic gets a staged tree:

- each database snapshot as fixed-size, page-aligned pieces under ``.hermes-backup/pieces/``
  (``pieces``: restic then stores a changed page as one small piece, not a ~1 MiB chunk);
- the other files as they are (copied with their modes and mtimes);
- our manifest (databases, row counts, SHA-256 of each checked copy, pieces) at
  ``.hermes-backup/manifest.json``.

The tree is staged at a FIXED path under the scratch folder and backed up as ``.``
with a fixed ``--host``, so the snapshot's root is the data dir itself (a plain
``restic restore`` gives the data dir back) and restic finds its parent snapshot
(unchanged files are not re-read: ``--ignore-inode --ignore-ctime``, since staging
copies them, and a piece's mtime comes from its content: ``pieces``). Restore joins the
pieces, checks that every database hashes to the copy ``create`` checked (``verify`` runs
``integrity_check`` again as well), and keeps our staged, verified, all-or-nothing swap.
"""

from __future__ import annotations

import contextlib
import json
import os
import platform
import re
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field, replace
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import Any, TextIO

from hermes_runtime.backup.dbsnap import (
    check_and_hash,
    check_database,
    file_sha256,
    snapshot_database,
)
from hermes_runtime.backup.deferred_checks import DeferredChecks
from hermes_runtime.backup.litestream import ReplicaLocation
from hermes_runtime.backup.pieces import (
    PIECE_SIZE,
    PIECES_DIR,
    JoinedDatabase,
    PieceSet,
    join_piece_stream,
    split_into_pieces,
)
from hermes_runtime.backup.replica_order import (
    ReplicaChoice,
    ResticCopies,
    list_replicas,
    newer_replicas,
    restore_replicas,
)
from hermes_runtime.backup.reports import (
    BackupSummary,
    PrunePolicy,
    PruneReport,
    RestoreReport,
    SnapshotInfo,
    VerifyReport,
)
from hermes_runtime.backup.restic import (
    ResticRepository,
    failure_message,
    json_document,
    read_restic_stream,
    repository_missing,
    require_folder,
    run_restic,
    stream_restic,
)
from hermes_runtime.backup.restore import (
    data_dir_entries,
    remove_stale_stages,
    staging_root,
    swap_in,
)
from hermes_runtime.backup.selection import (
    STAGING_PREFIX,
    Excluder,
    FoundFile,
    Selection,
    make_excluder,
    scan_data_dir,
)
from hermes_runtime.common.errors import RuntimeFailure, name_list
from hermes_runtime.common.flock import try_flock
from hermes_runtime.common.logs import Reporter, log_event, reporter

TAG = "hermes-runtime"
DATABASES_TAG = "hermes-databases="
FILES_TAG = "hermes-files="  # the data dir's files and databases (restic also counts pieces)
BACKUP_ID_TAG = "hermes-backup-id="  # also in the manifest: ties a restored tree to its listing
HOST = "hermes-runtime"  # fixed: pods change names, and forget groups by host
MANIFEST_DIR = ".hermes-backup"
MANIFEST_RELPATH = f"{MANIFEST_DIR}/manifest.json"
STAGE_NAME = "hermes-restic-stage"
COPIES_NAME = "hermes-restic-copies"  # database copies being cut into pieces and checked
CHECKED_DURING_UPLOAD = "checked while restic stored the snapshot"  # a failure removes it
FULL_ID = re.compile(r"[0-9a-f]{64}")  # a whole snapshot id, as restic 0.18 prints it
PROGRESS_EVERY_SECONDS = 10.0
MANIFEST_FORMAT = 2  # 2: databases as pieces (format 1: each database one file, still read)


@dataclass
class TreeManifest:
    """What restic cannot know: which files are databases, their checks and row counts."""

    created_at: str
    source: dict[str, str]
    excludes: list[str]
    databases: dict[str, dict[str, Any]] = field(default_factory=dict)
    files: int = 0
    format: int = MANIFEST_FORMAT
    backup_id: str = ""  # random, also a tag of the restic snapshot ("" before this field)


def create_restic_backup(
    data_dir: Path,
    repo: ResticRepository,
    *,
    excludes: tuple[str, ...] = (),
    default_excludes: bool = True,
    work_dir: Path | None = None,
    db_attempts: int = 5,
    stream: TextIO | None = None,
    progress_every: float = PROGRESS_EVERY_SECONDS,
    piece_size: int = PIECE_SIZE,
) -> BackupSummary:
    """Stage ``data_dir`` (database snapshots, other files, manifest) and back it up with restic.

    ``piece_size`` 0 stages each database as one file (the benchmark's comparison).
    """
    if not data_dir.is_dir():
        raise RuntimeFailure(f"--data-dir {data_dir}: not a directory")
    data_dir = data_dir.resolve()
    started = time.monotonic()
    excluder = make_excluder(excludes, defaults=default_excludes)
    selection = scan_data_dir(data_dir, excluder)
    stage = Path(work_dir or tempfile.gettempdir()) / STAGE_NAME
    with _exclusive(stage):
        return _create_staged(
            data_dir,
            repo,
            stage,
            selection,
            excluder,
            started,
            _Staging(db_attempts, piece_size, stage.with_name(COPIES_NAME)),
            stream,
            progress_every,
        )


@contextlib.contextmanager
def _exclusive(stage: Path) -> Iterator[None]:
    """One backup at a time per scratch folder: the stage path is fixed (restic's parent)."""
    stage.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(stage.parent, os.O_RDONLY | os.O_DIRECTORY)  # a lock that leaves no file
    try:
        if not try_flock(fd):
            raise RuntimeFailure(
                f"another backup is staging in {stage}: wait for it or pass another --work-dir"
            )
        yield
    finally:
        os.close(fd)


def _create_staged(
    data_dir: Path,
    repo: ResticRepository,
    stage: Path,
    selection: Selection,
    excluder: Excluder,
    started: float,
    staging: _Staging,
    stream: TextIO | None,
    progress_every: float,
) -> BackupSummary:
    for scratch in (stage, staging.copies):
        shutil.rmtree(scratch, ignore_errors=True)
    stage.mkdir(mode=0o700, parents=True)
    staging.copies.mkdir(mode=0o700)
    manifest = TreeManifest(
        created_at=datetime.now(UTC).isoformat(),
        source={"data_dir": str(data_dir), "host": platform.node()},
        excludes=list(excluder.patterns),
        backup_id=os.urandom(16).hex(),
    )
    with reporter("backup.create", stream) as progress:
        repo = repo.with_messages_to(lambda line: progress.relay("restic", line))
        progress.step("started", target=repo.url, data_dir=str(data_dir), scratch=str(stage))
        progress.start_task(f"backup {data_dir.name}", total=selection.total_bytes)
        try:
            with DeferredChecks() as deferred:
                try:
                    _stage_tree(data_dir, stage, selection, manifest, staging, progress, deferred)
                except OSError as exc:
                    raise RuntimeFailure(
                        f"backup of {data_dir} failed: {exc} (scratch space: {stage})"
                    ) from exc
                uploading = time.monotonic()
                summary = _upload(repo, stage, manifest, progress, progress_every)
                restic_seconds = time.monotonic() - uploading
                snapshot_id = _snapshot_id(repo, summary)
                _require_deferred_checks(repo, deferred, snapshot_id, data_dir, progress)
        finally:
            for scratch in (stage, staging.copies):
                shutil.rmtree(scratch, ignore_errors=True)
        added = int(summary.get("data_added_packed", summary.get("data_added", 0)))
        progress.step(
            "finished",
            snapshot=snapshot_id,
            bytes_uploaded=added,
            restic_seconds=round(restic_seconds, 3),
        )
    return BackupSummary(
        id=snapshot_id,
        target=repo.url,
        duration_seconds=round(time.monotonic() - started, 3),
        bytes_read=int(summary.get("total_bytes_processed", 0)),
        bytes_uploaded=added,
        files=manifest.files,
        files_uploaded=int(summary.get("files_new", 0)) + int(summary.get("files_changed", 0)),
        files_unchanged=int(summary.get("files_unmodified", 0)),
        databases={path: db["tables"] for path, db in manifest.databases.items()},
        skipped=selection.skipped_special,
    )


def _upload(
    repo: ResticRepository,
    stage: Path,
    manifest: TreeManifest,
    progress: Reporter,
    progress_every: float,
) -> dict[str, Any]:
    """``restic backup`` of the staged tree: restic's summary record."""
    require_folder(repo)  # an unmounted backup volume fails; restic init would fill the mount point
    # Shown by list, no dump needed.
    databases = f"{DATABASES_TAG}{len(manifest.databases)}"
    files = f"{FILES_TAG}{manifest.files + len(manifest.databases)}"
    args = ["backup", "--json", "--host", HOST, "--tag", TAG]
    args += ["--tag", databases, "--tag", files, "--tag", f"{BACKUP_ID_TAG}{manifest.backup_id}"]
    args += ["--ignore-inode", "--ignore-ctime", "."]
    meter = _Meter(progress, progress_every)
    records = stream_restic(
        _temp_in(repo, stage.parent), args, meter.record, cwd=stage, create_missing=True
    )
    return next((r for r in records if r.get("message_type") == "summary"), {})


def _snapshot_id(repo: ResticRepository, summary: dict[str, Any]) -> str:
    if not summary.get("snapshot_id"):
        raise RuntimeFailure(f"restic backup on {repo.url} printed no snapshot id")
    snapshot_id = str(summary["snapshot_id"])
    if not FULL_ID.fullmatch(snapshot_id):  # older restic printed a short one
        snapshot_id = find_restic_snapshot(repo, snapshot_id).id
    return snapshot_id


def _require_deferred_checks(
    repo: ResticRepository,
    deferred: DeferredChecks,
    snapshot_id: str,
    data_dir: Path,
    progress: Reporter,
) -> None:
    """Wait for the virtual-table checks; if one failed, remove the snapshot and fail."""
    waiting = time.monotonic()
    failures = deferred.failures()
    progress.step("virtual_tables_checked", waited_seconds=round(time.monotonic() - waiting, 3))
    if not failures:
        return
    run_restic(repo, ["forget", snapshot_id])  # its data goes with the next prune
    found = "; ".join(f"database {data_dir / path}: {what}" for path, what in failures.items())
    raise RuntimeFailure(
        f"{found}: the snapshot fails integrity_check of its virtual tables; "
        f"restic snapshot {snapshot_id} was removed"
    )


def _temp_in(repo: ResticRepository, scratch: Path) -> ResticRepository:
    """restic with its temporary pack files (16 MiB each, several at once) in ``scratch``.

    restic writes every pack to a temporary file in ``$TMPDIR`` before uploading it. In the
    chart's backup pod ``/tmp`` is a small emptyDir (``agent.tmpSizeLimit``): the packs
    belong on the scratch volume sized for the backup, like the staged snapshots.
    """
    return replace(repo, env={**repo.env, "TMPDIR": str(scratch)})


@dataclass
class _Meter:
    """Turns restic's status records into our bar, or a progress line every few seconds."""

    progress: Reporter
    every: float
    done: int = 0
    last_line: float = field(default_factory=time.monotonic)

    def record(self, record: dict[str, Any]) -> None:
        if record.get("message_type") != "status":
            return
        bytes_done = int(record.get("bytes_done", 0))
        self.progress.advance(max(0, bytes_done - self.done))
        self.done = max(self.done, bytes_done)
        now = time.monotonic()
        due = now - self.last_line >= self.every and bytes_done > 0
        if not self.progress.interactive and due:
            self.last_line = now
            self.progress.step(
                "progress", bytes_done=bytes_done, bytes_total=int(record.get("total_bytes", 0))
            )


@dataclass(frozen=True)
class _Staging:
    """How databases are staged: snapshot attempts, the piece size (0: one file each), and
    where the copies are cut into pieces (outside the stage: restic must not store them)."""

    db_attempts: int
    piece_size: int
    copies: Path


def _stage_database(
    data_dir: Path, stage: Path, found: FoundFile, staging: _Staging, deferred: DeferredChecks
) -> tuple[dict[str, Any], dict[str, float]]:
    """Snapshot one database, check it, cut it into pieces in ``stage``.

    Returns its manifest record and the seconds each step took.

    Its virtual tables are checked beside the upload (``deferred``) when the scratch space
    has room to keep the copy whole meanwhile; otherwise here, with the rest of the check.
    """
    pieced = bool(staging.piece_size)
    copy = (staging.copies if pieced else stage) / found.relpath
    copy.parent.mkdir(parents=True, exist_ok=True)
    seconds = snapshot_database(data_dir / found.relpath, copy, attempts=staging.db_attempts)
    ended = datetime.now(UTC).isoformat()  # no commit after this is in the copy
    size = copy.stat().st_size
    checked = time.monotonic()
    # Pieced only: a copy in the stage must not gain a -shm while restic reads the stage.
    beside = pieced and deferred.start(found.relpath, copy)
    where = f"{MANIFEST_DIR}/{PIECES_DIR}/{found.relpath}"
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="split") as pool:
        # With the copy kept whole for the deferred check, the pieces are cut meanwhile.
        cut = partial(split_into_pieces, copy, stage, where, staging.piece_size)
        splitting = pool.submit(cut, keep_source=True) if beside else None
        check, digest = check_and_hash(copy, virtual_tables=not beside)
        check_seconds = time.monotonic() - checked
        if not check.ok:
            raise RuntimeFailure(
                f"database {data_dir / found.relpath}: snapshot fails integrity_check: "
                f"{check.integrity}"
            )
        split = time.monotonic()
        pieces = splitting.result() if splitting else cut() if pieced else None
    if beside:
        deferred.discard_when_checked(found.relpath, copy)
    for suffix in ("-wal", "-shm"):
        copy.with_name(copy.name + suffix).unlink(missing_ok=True)
    if not pieced:
        os.chmod(copy, found.mode)
    record: dict[str, Any] = {
        "integrity": check.integrity,
        "tables": check.tables,
        "sha256": digest,
        "size": size,
        "snapshot_seconds": round(seconds, 4),
        "snapshot_at": ended,
        "mode": found.mode,
    }
    if beside:
        record["virtual_tables"] = CHECKED_DURING_UPLOAD
    if pieces is not None:
        record["pieces"] = asdict(pieces)
    steps = {"seconds": seconds, "check_seconds": check_seconds}
    steps["pieces_seconds"] = time.monotonic() - split  # beyond the check, when side by side
    return record, {step: round(value, 3) for step, value in steps.items()}


def _stage_tree(
    data_dir: Path,
    stage: Path,
    selection: Selection,
    manifest: TreeManifest,
    staging: _Staging,
    progress: Reporter,
    deferred: DeferredChecks,
) -> None:
    for directory in selection.dirs:
        (stage / directory.relpath).mkdir(parents=True, exist_ok=True)
    for found in selection.databases:
        record, seconds = _stage_database(data_dir, stage, found, staging, deferred)
        manifest.databases[found.relpath] = record
        progress.step("database", path=found.relpath, **seconds)
    for found in selection.files:
        dest = stage / found.relpath
        dest.parent.mkdir(parents=True, exist_ok=True)
        try:
            shutil.copy2(data_dir / found.relpath, dest, follow_symlinks=False)
        except FileNotFoundError:
            continue  # deleted since the scan
        manifest.files += 1
    for link in selection.links:
        dest = stage / link.relpath
        dest.parent.mkdir(parents=True, exist_ok=True)
        os.symlink(link.target, dest)
    for directory in sorted(selection.dirs, key=lambda d: d.relpath.count("/"), reverse=True):
        os.chmod(stage / directory.relpath, directory.mode)
    (stage / MANIFEST_DIR).mkdir(exist_ok=True)
    (stage / MANIFEST_RELPATH).write_text(json.dumps(asdict(manifest), indent=2, sort_keys=True))


NO_LOCK = "--no-lock"  # restic's flag for commands that only read the repository


def _logged(event: str) -> Callable[[str], None]:
    """Relays restic's stderr as structured lines: why a command waits on a failing store."""
    return lambda line: log_event(event, message=line)


def list_restic_snapshots(repo: ResticRepository) -> list[SnapshotInfo]:
    """Our snapshots in the repository, oldest first; none when it does not exist yet.

    Without restic's lock (``--no-lock``): a listing changes nothing, and the runbook's shell
    pod mounts the backup volume read-only, where restic would retry writing its lock for
    minutes. A prune running at the same time may still list a snapshot it is removing.
    """
    return [listed.info for listed in _listed_snapshots(repo)]


@dataclass(frozen=True)
class _Listed:
    info: SnapshotInfo
    backup_id: str  # the create's id from the snapshot's tags ("" for older snapshots)


def _listed_snapshots(repo: ResticRepository) -> list[_Listed]:
    """``list_restic_snapshots`` with each snapshot's backup id."""
    require_folder(repo)
    args = [NO_LOCK, "snapshots", "--json", "--tag", TAG]
    done = run_restic(repo, args, check=False)
    if done.returncode != 0:
        if repository_missing(done):
            return []
        raise RuntimeFailure(failure_message(repo, args, done))
    listed = []
    for snap in json_document(done.stdout) or []:
        summary = snap.get("summary") or {}
        tags = snap.get("tags") or []
        info = SnapshotInfo(
            id=snap["id"],
            created_at=snap["time"],
            files=_tag_count(tags, FILES_TAG, int(summary.get("total_files_processed", 0))),
            databases=_tag_count(tags, DATABASES_TAG, 0),
            bytes=int(summary.get("total_bytes_processed", 0)),
            verified=False,
            status="ok",
        )
        ids = [t.removeprefix(BACKUP_ID_TAG) for t in tags if t.startswith(BACKUP_ID_TAG)]
        listed.append(_Listed(info, ids[0] if ids else ""))
    return listed


def _tag_count(tags: list[str], prefix: str, default: int) -> int:
    for tag in tags:
        if tag.startswith(prefix) and tag.removeprefix(prefix).isdigit():
            return int(tag.removeprefix(prefix))
    return default


def find_restic_snapshot(
    repo: ResticRepository, snapshot: str, infos: list[SnapshotInfo] | None = None
) -> SnapshotInfo:
    """``latest`` or an id (or its unique prefix) among our snapshots (``infos``, else listed)."""
    infos = list_restic_snapshots(repo) if infos is None else infos
    if not infos:
        raise RuntimeFailure(
            f"backup repository {repo.url} holds no snapshot (asked for {snapshot})"
        )
    if snapshot == "latest":
        return infos[-1]
    matches = [i for i in infos if i.id.startswith(snapshot)]
    if len(matches) != 1:
        raise RuntimeFailure(f"backup repository {repo.url}: no single snapshot {snapshot!r}")
    return matches[0]


PIECES_FOLDER = f"/{MANIFEST_DIR}/{PIECES_DIR}"  # in the snapshot
# ``latest`` as each restic run resolves it (``--tag TAG``, as the listing filters).
LATEST = SnapshotInfo("latest", "", files=0, databases=1, bytes=0, verified=False, status="ok")


def _restore_tree(
    repo: ResticRepository,
    snapshot: SnapshotInfo,
    dest: Path,
    extra: list[str] | None = None,
    *,
    integrity_check: bool = False,
) -> tuple[TreeManifest, dict[str, str]]:
    """The snapshot's tree in ``dest``, every database joined and checked against the manifest.

    Two restic runs side by side: ``restore`` of everything but the pieces, and ``dump`` of
    the pieces folder, joined into the databases as it streams (``join_piece_stream``).
    Returns the manifest and how each database was checked. A database whose manifest
    records its SHA-256 (every snapshot since that field) must hash to it: then it is the
    very copy ``create`` ran ``integrity_check`` on and counted, and the check is not
    repeated unless ``integrity_check`` asks (``verify`` does). Older snapshots are checked.

    For ``LATEST`` each of the two runs resolves ``latest`` itself, filtered as the listing is;
    the caller ties the tree to a listing.
    """
    extra = extra or []
    filters = ["--tag", TAG] if snapshot is LATEST else []
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="restic-dump") as pool:
        # A snapshot without databases has no pieces folder to dump.
        dumping = (
            pool.submit(_dump_pieces, repo, snapshot.id, dest, extra, filters)
            if snapshot.databases
            else None
        )
        target = ["--target", str(dest), "--exclude", PIECES_FOLDER]
        run_restic(repo, [*extra, "restore", snapshot.id, *filters, *target])
        manifest = _read_manifest(dest, snapshot.id)
        pieced = any("pieces" in record for record in manifest.databases.values())
        joined = dumping.result() if dumping is not None and pieced else {}
    checked: dict[str, str] = {}
    for path, record in manifest.databases.items():
        digest = None
        if "pieces" in record:
            digest = _place_joined(joined, dest, path, record, snapshot.id)
        checked[path] = _check_restored(dest, path, record, snapshot.id, integrity_check, digest)
    shutil.rmtree(dest / MANIFEST_DIR)
    return manifest, checked


def _dump_pieces(
    repo: ResticRepository, snapshot_id: str, dest: Path, extra: list[str], filters: list[str]
) -> dict[str, JoinedDatabase]:
    """Every database of the snapshot, joined under ``dest`` from restic's dump of the pieces."""
    args = [*extra, "dump", *filters, "--archive", "tar", snapshot_id, PIECES_FOLDER]
    return read_restic_stream(repo, args, lambda stream: join_piece_stream(stream, dest))


def _read_manifest(dest: Path, snapshot_id: str) -> TreeManifest:
    try:
        return TreeManifest(**json.loads((dest / MANIFEST_RELPATH).read_text()))
    except (OSError, ValueError, TypeError) as exc:
        raise RuntimeFailure(f"snapshot {snapshot_id}: no readable {MANIFEST_RELPATH}") from exc


def _place_joined(
    joined: dict[str, JoinedDatabase],
    dest: Path,
    path: str,
    record: dict[str, Any],
    snapshot_id: str,
) -> str:
    """Move the joined database to ``dest / path``, once its pieces match the manifest."""
    pieces = PieceSet(**record["pieces"])
    database = joined.get(pieces.dir)
    if database is None or (database.count, database.size) != (pieces.count, pieces.size):
        found = "none" if database is None else f"{database.count} pieces, {database.size} bytes"
        raise RuntimeFailure(
            f"database {path} of snapshot {snapshot_id}: expected {pieces.count} pieces of "
            f"{pieces.size} bytes in all under {pieces.dir}, found {found}"
        )
    (dest / path).parent.mkdir(parents=True, exist_ok=True)
    os.replace(database.path, dest / path)
    os.chmod(dest / path, record.get("mode", 0o600))
    return database.sha256


def _check_restored(
    dest: Path,
    path: str,
    record: dict[str, Any],
    snapshot_id: str,
    integrity_check: bool,
    digest: str | None = None,
) -> str:
    """Fail unless the restored database is the one recorded; say how that was shown.

    ``digest`` is the file's SHA-256 when it was computed on the way in (joined pieces).
    """
    expected = record.get("sha256")
    if expected is not None:
        actual = digest or file_sha256(dest / path)
        if actual != expected:
            raise RuntimeFailure(
                f"database {path} of snapshot {snapshot_id} does not check out: its SHA-256 "
                f"{actual} is not the {expected} recorded when it was checked"
            )
        if not integrity_check:
            return "sha256"
    check = check_database(dest / path)
    for suffix in ("-wal", "-shm"):
        (dest / (path + suffix)).unlink(missing_ok=True)
    if not check.ok or check.tables != record["tables"]:
        raise RuntimeFailure(
            f"database {path} of snapshot {snapshot_id} does not check out: "
            f"integrity {check.integrity}, tables {check.tables} != {record['tables']}"
        )
    return "integrity_check" if expected is None else "sha256+integrity_check"


def verify_restic_snapshot(
    repo: ResticRepository,
    snapshot: str = "latest",
    *,
    scratch: Path | None = None,
    lock: bool = True,
) -> VerifyReport:
    """Read back every pack (``check --read-data``), then restore to scratch and check the DBs.

    ``lock=False`` (``verify --no-mark``) works on a read-only repository: restic's
    ``--no-lock``, at the price of not excluding a concurrent prune.
    """
    no_lock = [] if lock else [NO_LOCK]
    repo = repo.with_messages_to(_logged("backup.verify.restic"))
    found = find_restic_snapshot(repo, snapshot)
    snapshot_id = found.id
    run_restic(repo, [*no_lock, "check", "--read-data"])
    dest = Path(scratch or tempfile.gettempdir()) / f"hermes-verify-{snapshot_id[:8]}"
    shutil.rmtree(dest, ignore_errors=True)
    try:
        manifest, _ = _restore_tree(repo, found, dest, no_lock, integrity_check=True)
        size = sum(p.stat().st_size for p in dest.rglob("*") if p.is_file())
    finally:
        shutil.rmtree(dest, ignore_errors=True)
    return VerifyReport(snapshot_id, manifest.files, len(manifest.databases), size)


def restore_restic_snapshot(
    repo: ResticRepository,
    data_dir: Path,
    *,
    snapshot: str = "latest",
    force: bool = False,
    if_empty: bool = False,
    replicas: ReplicaLocation | None = None,
) -> RestoreReport:
    """Restore into ``data_dir`` all or nothing: stage beside it, check, then swap by renames.

    With ``replicas`` (continuous replication's location, only for ``latest``), each database
    comes from whichever is newer, the snapshot's copy or its Litestream replica (also a
    database the snapshot lacks: one born after it); with replicas but no snapshot at all
    only the databases come back. The report's ``sources`` says which copy each database came from.

    Without restic's lock (``--no-lock``): a restore only reads the repository, and the
    runbook mounts the backup volume read-only, where restic would retry its lock for minutes.
    A prune running at the same time can only make the staging fail; ``data_dir`` is then
    unchanged.
    """
    started = time.monotonic()
    repo = repo.with_messages_to(_logged("backup.restore.restic"))
    existing = data_dir_entries(data_dir)
    if existing and if_empty:
        return RestoreReport(None, str(data_dir), False, "data dir already holds data")
    if existing and not force:
        raise RuntimeFailure(
            f"--data-dir {data_dir} is not empty ({name_list(existing)}); "
            "pass --force to replace its content, or --if-empty to skip"
        )
    early = snapshot == "latest" and replicas is None  # restored beside the listing
    found = None if early else _snapshot_to_restore(repo, snapshot, replicas)
    created = not data_dir.exists()
    data_dir.mkdir(parents=True, exist_ok=True)
    stage_root = staging_root(data_dir)
    tag = f"{STAGING_PREFIX}{data_dir.name}-{os.urandom(4).hex()}"
    stage = stage_root / f"{tag}-stage"
    remove_stale_stages(stage_root, data_dir.name)
    log_event(
        "backup.restore.started",
        snapshot=found.id if found else snapshot,
        data_dir=str(data_dir),
        staging=str(stage),
    )
    staged = None
    if early:
        try:
            found, staged = _restore_latest_beside_listing(repo, stage)
        except BaseException:
            shutil.rmtree(stage, ignore_errors=True)
            if created:
                with contextlib.suppress(OSError):
                    data_dir.rmdir()
            raise
    snapshot_id = found.id if found else None
    try:
        manifest, sources = _stage_restore(repo, found, stage, replicas, staged)
    except (OSError, RuntimeFailure) as exc:
        shutil.rmtree(stage, ignore_errors=True)
        raise RuntimeFailure(
            f"restore of snapshot {snapshot_id or '(none: replicas only)'} into {data_dir} "
            f"failed while staging in {stage}: {exc}; {data_dir} is unchanged"
        ) from exc
    for path, choice in sources.items():
        log_event("backup.restore.database", path=path, **asdict(choice))
    swap_in(stage, data_dir, stage_root / f"{tag}-old", existing)
    return RestoreReport(
        snapshot_id,
        str(data_dir),
        True,
        "restored",
        files=manifest.files,
        databases=len(sources),
        duration_seconds=round(time.monotonic() - started, 3),
        sources={path: asdict(choice) for path, choice in sources.items()},
    )


def _snapshot_to_restore(
    repo: ResticRepository, snapshot: str, replicas: ReplicaLocation | None
) -> SnapshotInfo | None:
    """The snapshot; None only for ``latest`` with replicas and no snapshot in the repository."""
    if replicas is None or snapshot != "latest":
        return find_restic_snapshot(repo, snapshot)
    infos = list_restic_snapshots(repo)  # listed once: every restic run derives the key
    if not infos and list_replicas(replicas):
        return None
    return find_restic_snapshot(repo, snapshot, infos)


def _restore_latest_beside_listing(
    repo: ResticRepository, stage: Path
) -> tuple[SnapshotInfo, tuple[TreeManifest, dict[str, str]] | None]:
    """The latest snapshot, and its tree staged in ``stage`` while it was being listed.

    Why: every restic run derives the repository key first (~0.7 s of CPU here), and a restore
    waited for the listing's before starting its own two runs. Here the listing runs beside
    them, each resolving ``latest`` itself. The staged tree counts only if its manifest carries
    the backup id tagged on the snapshot the listing calls latest: a create that lands
    between them, a snapshot older than that field, or a failed run gives None (``stage``
    removed; the caller restores the listed snapshot by its id, reporting any error anew).
    Raises only what the listing raises (no snapshot, an unreachable repository).
    """
    quiet = repo.with_messages_to(lambda line: None)  # a failure here is redone and reported
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="restic-list") as pool:
        listing = pool.submit(_listed_snapshots, repo)
        staged: tuple[TreeManifest, dict[str, str]] | None
        try:
            staged = _restore_tree(quiet, LATEST, stage, [NO_LOCK])
        except (OSError, RuntimeFailure) as exc:
            staged, reason = None, str(exc)
        listed = listing.result()
    found = find_restic_snapshot(repo, "latest", [entry.info for entry in listed])
    newest = listed[-1].backup_id
    if staged is not None and newest and staged[0].backup_id == newest:
        return found, staged
    if staged is not None:
        reason = "its tree is not the listed latest snapshot's (a backup landed meanwhile?)"
    log_event("backup.restore.by_id", snapshot=found.id, reason=reason)
    try:  # what is left of the first tree must not mix into the second
        shutil.rmtree(stage)
    except FileNotFoundError:
        pass
    except OSError as exc:
        raise RuntimeFailure(f"cannot empty the staging folder {stage}: {exc}") from exc
    return found, None


def _stage_restore(
    repo: ResticRepository,
    snapshot: SnapshotInfo | None,
    stage: Path,
    replicas: ReplicaLocation | None,
    staged: tuple[TreeManifest, dict[str, str]] | None = None,
) -> tuple[TreeManifest, dict[str, ReplicaChoice]]:
    """The snapshot's tree in ``stage`` (``staged``: already there), then the newer replicas."""
    snapshot_id = snapshot.id if snapshot else None
    checked: dict[str, str]
    if staged is not None:
        manifest, checked = staged
    elif snapshot is None:
        stage.mkdir(mode=0o700, parents=True)
        manifest = TreeManifest(created_at="", source={}, excludes=[])
        checked = {}
    else:
        manifest, checked = _restore_tree(repo, snapshot, stage, [NO_LOCK])
    sources = {
        path: ReplicaChoice(
            "restic",
            record.get("snapshot_at") or manifest.created_at,
            snapshot_id or "",
            checked[path],
        )
        for path, record in manifest.databases.items()
    }
    if replicas is None:
        return manifest, sources
    scratch = stage / MANIFEST_DIR  # removed with the manifest's folder before the swap
    scratch.mkdir(exist_ok=True)
    plans = newer_replicas(replicas, _restic_copies(repo, snapshot_id, manifest), scratch)
    restore_replicas(replicas, plans, stage)
    shutil.rmtree(scratch)
    for plan in plans:
        at = plan.last_tx_at.isoformat() if plan.last_tx_at else ""
        sources[plan.relpath] = ReplicaChoice("litestream", at, plan.max_txid, "integrity_check")
    return manifest, dict(sorted(sources.items()))


def _restic_copies(
    repo: ResticRepository, snapshot_id: str | None, manifest: TreeManifest
) -> ResticCopies:
    """When each database copy of the snapshot was taken, for the choice against replicas.

    A manifest written before ``snapshot_at`` existed: restic's own snapshot time, taken
    after every database was staged, bounds them all.
    """
    if snapshot_id is None:
        return ResticCopies(None, {})
    ended = {
        path: record["snapshot_at"]
        for path, record in manifest.databases.items()
        if record.get("snapshot_at")
    }
    if len(ended) < len(manifest.databases):
        times = [s.created_at for s in list_restic_snapshots(repo) if s.id == snapshot_id]
        if not times:
            raise RuntimeFailure(f"backup repository {repo.url}: snapshot {snapshot_id} is gone")
        ended = {path: ended.get(path, times[0]) for path in manifest.databases}
    return ResticCopies(
        datetime.fromisoformat(manifest.created_at),
        {path: datetime.fromisoformat(at) for path, at in ended.items()},
    )


def prune_restic_snapshots(
    repo: ResticRepository, policy: PrunePolicy, *, dry_run: bool = False
) -> PruneReport:
    """``restic forget --prune`` with our keep flags, on our snapshots only."""
    args = ["forget", "--json", "--tag", TAG, "--group-by", "host"]
    args += ["--keep-last", str(policy.keep_last)]
    if policy.keep_daily:
        args += ["--keep-daily", str(policy.keep_daily)]
    if policy.keep_weekly:
        args += ["--keep-weekly", str(policy.keep_weekly)]
    args += ["--dry-run"] if dry_run else ["--prune"]
    repo = repo.with_messages_to(_logged("backup.prune.restic"))
    run_restic(repo, ["unlock"])  # only stale locks: those of a killed backup
    done = run_restic(repo, args)
    groups = json_document(done.stdout) or []
    kept = [s["id"] for g in groups for s in g.get("keep") or []]
    deleted = [s["id"] for g in groups for s in g.get("remove") or []]
    return PruneReport(kept=kept, deleted=deleted, dry_run=dry_run)
