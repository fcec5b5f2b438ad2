"""The manifest: the one object that makes a snapshot exist.

Layout of a target (both kinds)::

    blobs/<aa>/<sha256>.zst    content-addressed, zstd-compressed file and database bodies
    manifests/<id>.json        one per complete snapshot, written last
    verified/<id>.json         written by ``verify`` when a snapshot checked out

The manifest carries its own sha256 over a canonical JSON encoding of its
body, so a flipped byte that still parses as JSON is caught too.
"""

from __future__ import annotations

import hashlib
import json
import re
import secrets
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from typing import Any

from hermes_runtime.common.errors import RuntimeFailure

FORMAT_VERSION = 1
MANIFEST_PREFIX = "manifests/"
BLOB_PREFIX = "blobs/"
VERIFIED_PREFIX = "verified/"
SNAPSHOT_ID_RE = re.compile(r"^\d{8}T\d{9}Z-[0-9a-f]{6}$")


@dataclass(frozen=True)
class FileRecord:
    """A regular file: where it goes, what it holds (sha256 of the raw bytes)."""

    path: str
    sha256: str
    size: int
    mode: int
    mtime_ns: int
    inode: int = 0


@dataclass(frozen=True)
class DatabaseRecord:
    """A SQLite snapshot: checked before upload, with row counts per table."""

    path: str
    sha256: str
    size: int
    mode: int
    integrity: str
    tables: dict[str, int]
    method: str
    snapshot_seconds: float


@dataclass(frozen=True)
class LinkRecord:
    path: str
    target: str


@dataclass(frozen=True)
class DirRecord:
    path: str
    mode: int


@dataclass
class Manifest:
    """Everything needed to rebuild the data dir of one snapshot."""

    id: str
    created_at: str
    finished_at: str
    source: dict[str, str]
    excludes: list[str]
    databases: list[DatabaseRecord] = field(default_factory=list)
    files: list[FileRecord] = field(default_factory=list)
    links: list[LinkRecord] = field(default_factory=list)
    dirs: list[DirRecord] = field(default_factory=list)
    stats: dict[str, float] = field(default_factory=dict)
    format: int = FORMAT_VERSION

    def blob_digests(self) -> set[str]:
        return {f.sha256 for f in self.files} | {d.sha256 for d in self.databases}

    @property
    def total_bytes(self) -> int:
        return sum(f.size for f in self.files) + sum(d.size for d in self.databases)


def new_snapshot_id(now: datetime | None = None) -> str:
    """Ids sort by creation time (to the millisecond), so "latest" is simply the largest id."""
    moment = now or datetime.now(UTC)
    millis = moment.microsecond // 1000
    return f"{moment.strftime('%Y%m%dT%H%M%S')}{millis:03d}Z-{secrets.token_hex(3)}"


def snapshot_time(snapshot_id: str) -> datetime:
    return datetime.strptime(snapshot_id[:18], "%Y%m%dT%H%M%S%f").replace(tzinfo=UTC)


def manifest_key(snapshot_id: str) -> str:
    return f"{MANIFEST_PREFIX}{snapshot_id}.json"


def verified_key(snapshot_id: str) -> str:
    return f"{VERIFIED_PREFIX}{snapshot_id}.json"


def blob_key(digest: str) -> str:
    return f"{BLOB_PREFIX}{digest[:2]}/{digest}.zst"


def digest_from_blob_key(key: str) -> str | None:
    name = key.rsplit("/", 1)[-1]
    if not name.endswith(".zst"):
        return None
    digest = name[: -len(".zst")]
    return digest if re.fullmatch(r"[0-9a-f]{64}", digest) else None


def _canonical(body: dict[str, Any]) -> bytes:
    return json.dumps(body, sort_keys=True, separators=(",", ":")).encode()


def encode_manifest(manifest: Manifest) -> bytes:
    body = asdict(manifest)
    document = {"manifest": body, "sha256": hashlib.sha256(_canonical(body)).hexdigest()}
    return json.dumps(document, indent=1, sort_keys=True).encode() + b"\n"


def decode_manifest(data: bytes, where: str) -> Manifest:
    """Parse and check a manifest; ``where`` names it in every error."""
    try:
        document = json.loads(data)
        body = document["manifest"]
        recorded = document["sha256"]
    except (ValueError, KeyError, TypeError) as exc:
        raise RuntimeFailure(
            f"manifest {where} is corrupt: not a manifest document ({exc})"
        ) from exc
    if hashlib.sha256(_canonical(body)).hexdigest() != recorded:
        raise RuntimeFailure(f"manifest {where} is corrupt: its sha256 does not match its content")
    if body.get("format") != FORMAT_VERSION:
        raise RuntimeFailure(f"manifest {where}: unsupported format {body.get('format')!r}")
    try:
        return Manifest(
            id=body["id"],
            created_at=body["created_at"],
            finished_at=body["finished_at"],
            source=body["source"],
            excludes=body["excludes"],
            databases=[DatabaseRecord(**d) for d in body["databases"]],
            files=[FileRecord(**f) for f in body["files"]],
            links=[LinkRecord(**link) for link in body["links"]],
            dirs=[DirRecord(**d) for d in body["dirs"]],
            stats=body["stats"],
        )
    except (KeyError, TypeError) as exc:
        raise RuntimeFailure(f"manifest {where} is corrupt: missing field ({exc})") from exc
