"""Reading what a target holds: snapshot ids, manifests, blobs, verified marks."""

from __future__ import annotations

from dataclasses import dataclass

from hermes_runtime.backup.manifest import (
    BLOB_PREFIX,
    MANIFEST_PREFIX,
    SNAPSHOT_ID_RE,
    VERIFIED_PREFIX,
    Manifest,
    decode_manifest,
    digest_from_blob_key,
    manifest_key,
)
from hermes_runtime.backup.target import Target
from hermes_runtime.common.errors import RuntimeFailure


def snapshot_ids(target: Target) -> list[str]:
    """Ids of complete snapshots (those with a manifest), oldest first."""
    ids = []
    for obj in target.list_objects(MANIFEST_PREFIX):
        name = obj.key.removeprefix(MANIFEST_PREFIX)
        if name.endswith(".json") and SNAPSHOT_ID_RE.match(name[: -len(".json")]):
            ids.append(name[: -len(".json")])
    return sorted(ids)


def verified_ids(target: Target) -> set[str]:
    found = set()
    for obj in target.list_objects(VERIFIED_PREFIX):
        name = obj.key.removeprefix(VERIFIED_PREFIX)
        if name.endswith(".json"):
            found.add(name[: -len(".json")])
    return found


def load_manifest(target: Target, snapshot_id: str) -> Manifest:
    key = manifest_key(snapshot_id)
    manifest = decode_manifest(
        target.get_bytes(key), f"{target.url}/{key} (snapshot {snapshot_id})"
    )
    if manifest.id != snapshot_id:
        raise RuntimeFailure(
            f"manifest {target.url}/{key} (snapshot {snapshot_id}) is corrupt: "
            f"it names {manifest.id}"
        )
    return manifest


def resolve_snapshot(target: Target, wanted: str) -> str:
    """Turn ``latest`` or an id into an existing snapshot id, or fail naming the target."""
    ids = snapshot_ids(target)
    if wanted == "latest":
        if not ids:
            raise RuntimeFailure(f"backup target {target.url} holds no snapshot")
        return ids[-1]
    if wanted not in ids:
        raise RuntimeFailure(f"--snapshot {wanted}: no such snapshot in {target.url}")
    return wanted


@dataclass(frozen=True)
class BlobInfo:
    key: str
    size: int
    modified: float


def stored_blobs(target: Target) -> dict[str, BlobInfo]:
    """Every blob in the target by digest (partial uploads are not blobs)."""
    blobs = {}
    for obj in target.list_objects(BLOB_PREFIX):
        digest = digest_from_blob_key(obj.key)
        if digest is not None:
            blobs[digest] = BlobInfo(obj.key, obj.size, obj.modified)
    return blobs
