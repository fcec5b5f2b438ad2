"""Which copy of a database ``restore --snapshot latest`` takes: restic's, or its replica.

The rule: the copy whose LAST TRANSACTION is later wins; a tie or a doubt keeps restic's copy.
Never the time a file was written: Litestream writes files long after the transactions they
hold (compactions into levels 1-3, its daily snapshot), so a replica whose files are newer may
hold older data than the snapshot, and restoring it would lose the snapshot's last commits.

- restic's copy of a database holds every commit made before its one-step online snapshot
  began and none made after it ended; the manifest records when it ended, per database
  (``databases.<path>.snapshot_at``; a manifest without it: the restic snapshot's own time,
  which restic takes after every database was staged).
- A replica holds transactions 1..N (``max_txid`` of ``litestream restore -dry-run``). The
  header of the level-0 LTX file of transaction N carries, in ``Timestamp``, the moment
  Litestream read that transaction from the WAL (``DB.sync``: the clock is read right after
  the WAL); every compaction into levels 1-8 copies the last input's ``Timestamp``
  (superfly/ltx ``Compactor``). We read that header. Not the dry-run's ``timestamp``: that is a
  file's mtime (file replicas) or its S3 ``LastModified`` (the upload time), and a level-9
  snapshot's header says when the snapshot was written, however old its last transaction.
- The replica wins when its last transaction was read more than ``CLOCK_MARGIN`` after
  restic's copy ended: it then holds every commit of that copy, and later ones. The margin
  covers Litestream's own WAL read and the clocks of two pods. Within it, restic's copy is
  kept: what can be lost is the commits made during the snapshot and in the second after it.
- A database absent from the snapshot comes back when its replica's last transaction is after
  the backup started (born after it); one deleted before it keeps an old replica (Litestream
  never removes one) and stays deleted. With no restic snapshot at all every replica comes back.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

from hermes_runtime.backup.dbsnap import check_database
from hermes_runtime.backup.litestream import LTX_FOLDER, ReplicaPlan, restore_plan, restore_replica
from hermes_runtime.backup.replicas.base import Replicas, safe_url
from hermes_runtime.backup.untrusted import checked_name, inside
from hermes_runtime.common.errors import RuntimeFailure

CLOCK_MARGIN = timedelta(seconds=1)
SNAPSHOT_LEVEL = 9  # Litestream's snapshots: their header time is when they were written
LTX_MAGIC = b"LTX1"
LTX_HEADER = struct.Struct(">4sIIIQQq")  # magic, flags, page size, commit, min, max, timestamp


@dataclass(frozen=True)
class LtxFile:
    """One LTX file of a replica, from its key: ``<db>/[ltx/]<level>/<min>-<max>.ltx``."""

    relpath: str  # the database
    key: str  # below the replicas' root
    level: int
    min_txid: int
    max_txid: int


@dataclass(frozen=True)
class ReplicaChoice:
    """Where one restored database came from, for the restore report."""

    source: str  # "restic" or "litestream"
    at: str  # when that copy's last transaction was made (ISO 8601)
    ref: str  # the restic snapshot id, or Litestream's last transaction id
    checked: str  # how it was shown sound: "sha256" (the copy create checked), "integrity_check"


@dataclass(frozen=True)
class ResticCopies:
    """When the restic snapshot's database copies were taken; ``created_at`` None: no snapshot."""

    created_at: datetime | None
    ended_at: Mapping[str, datetime]  # per database in the snapshot: its snapshot's end

    def replica_wins(self, relpath: str, last_tx_at: datetime | None) -> bool:
        """True only when the replica provably holds more than the snapshot's copy."""
        if self.created_at is None:
            return True  # no snapshot: the replica is the only copy there is
        if last_tx_at is None:
            return False  # no proof of when its last transaction was made
        ended = self.ended_at.get(relpath)
        if ended is None:  # absent from the snapshot: born after it, or deleted before it
            return last_tx_at > self.created_at
        return last_tx_at > ended + CLOCK_MARGIN


def parse_ltx_key(key: str) -> LtxFile | None:
    """The LTX file a replica key names; None for anything else.

    Litestream's file replicas keep levels under ``ltx/<level>``, its S3 replicas under a
    four-digit ``<level>`` folder right below the database's path; files are
    named ``<min txid>-<max txid>.ltx`` in 16 hexadecimal digits each.
    """
    parts = key.split("/")
    if len(parts) < 3 or not parts[-1].endswith(".ltx") or not parts[-2].isdigit():
        return None
    try:
        low, high = (int(t, 16) for t in parts[-1].removesuffix(".ltx").split("-"))
    except ValueError:
        return None
    level = int(parts[-2])  # levels are 0-9: decimal and hexadecimal agree
    folder = parts[:-2]
    if folder and folder[-1] == LTX_FOLDER:
        folder = folder[:-1]
    relpath = "/".join(folder)
    return LtxFile(relpath, key, level, low, high) if relpath else None


def replica_files(replicas: Replicas) -> dict[str, list[LtxFile]]:
    """Every LTX file under the replicas' root, per database (``ltx_files``: keys checked)."""
    return ltx_files(replicas.ltx_keys(), replicas.agent_url())


def ltx_files(keys: Iterable[str], root_url: str) -> dict[str, list[LtxFile]]:
    """The LTX files among ``keys`` (below the replicas' root ``root_url``), per database.

    Each LTX key is checked (``untrusted``): whoever can write the bucket or the volume names
    them, and a database's key becomes a path under the staging folder. An S3 key is any
    string: AWS keeps ``..``, ``.`` and empty parts as written (SeaweedFS and MinIO refuse
    or fold them). Other keys (a console's folder marker ``db/``) are never read: skipped.
    """
    files: dict[str, list[LtxFile]] = {}
    for key in keys:
        parsed = parse_ltx_key(key)
        if parsed is None:
            continue
        checked_name(key, f"Litestream replica key {root_url}/{key}")
        files.setdefault(parsed.relpath, []).append(parsed)
    return dict(sorted(files.items()))


def list_replicas(replicas: Replicas) -> list[str]:
    """The relative paths of the databases that have a replica under the target's prefix."""
    return list(replica_files(replicas))


def last_transaction_at(replicas: Replicas, files: list[LtxFile], max_txid: int) -> datetime | None:
    """When Litestream read transaction ``max_txid`` from the WAL, from an LTX header.

    The header of the lowest-level file ending at that transaction below the snapshots' level
    (the level-0 file itself, or a compaction, which copies its time); None when only a
    snapshot holds it (no proof).
    """
    ending = [f for f in files if f.max_txid == max_txid and f.level < SNAPSHOT_LEVEL]
    if not ending:
        return None
    ltx = min(ending, key=lambda f: f.level)
    magic, _flags, _page, _commit, _low, high, millis = LTX_HEADER.unpack_from(
        _read_header(replicas, ltx.key)
    )
    if magic != LTX_MAGIC or high != max_txid:
        raise RuntimeFailure(
            f"litestream replica {safe_url(replicas.replica_url(ltx.relpath))}: "
            f"{ltx.key} is not the LTX file its name says (bad header)"
        )
    return datetime.fromtimestamp(millis / 1000, UTC)


def newer_replicas(replicas: Replicas, copies: ResticCopies, scratch: Path) -> list[ReplicaPlan]:
    """The replicas to restore instead of the snapshot's copy, with their last transaction."""
    chosen = []
    for relpath, files in replica_files(replicas).items():
        plan = restore_plan(replicas, relpath, scratch)
        if plan is None:
            continue
        last_tx_at = last_transaction_at(replicas, files, int(plan.max_txid, 16))
        if copies.replica_wins(relpath, last_tx_at):
            chosen.append(replace(plan, last_tx_at=last_tx_at))
    return chosen


def restore_replicas(replicas: Replicas, plans: list[ReplicaPlan], stage: Path) -> None:
    """Put each chosen replica into the staged tree, checked, in place of the snapshot's copy."""
    for plan in plans:
        dest = inside(stage, plan.relpath, f"Litestream replica {plan.url}")
        dest.parent.mkdir(parents=True, exist_ok=True)
        tmp = dest.with_name(f"{dest.name}.litestream-restore")
        for path in (tmp, *(tmp.with_name(tmp.name + s) for s in ("-wal", "-shm"))):
            path.unlink(missing_ok=True)
        restore_replica(replicas, plan.relpath, tmp)
        check = check_database(tmp)
        for suffix in ("-wal", "-shm"):
            tmp.with_name(tmp.name + suffix).unlink(missing_ok=True)
        if not check.ok:
            raise RuntimeFailure(
                f"database {plan.relpath} restored from Litestream replica {plan.url} fails "
                f"integrity_check: {check.integrity}"
            )
        if dest.exists():
            os.chmod(tmp, dest.stat().st_mode & 0o7777)
        os.replace(tmp, dest)


def _read_header(replicas: Replicas, key: str) -> bytes:
    """The first bytes of one LTX file: its header is never compressed."""
    header = replicas.read_header(key, LTX_HEADER.size)
    if len(header) < LTX_HEADER.size:
        raise RuntimeFailure(f"Litestream replicas {replicas.url}: file {key} is truncated")
    return header
