"""The manifest format: round trip, self-checksum, sortable ids."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest

from hermes_runtime.backup.manifest import (
    DatabaseRecord,
    FileRecord,
    Manifest,
    blob_key,
    decode_manifest,
    digest_from_blob_key,
    encode_manifest,
    new_snapshot_id,
    snapshot_time,
)
from hermes_runtime.common.errors import RuntimeFailure

DIGEST = "ab" * 32


def sample() -> Manifest:
    return Manifest(
        id=new_snapshot_id(),
        created_at="2026-11-29T10:00:00+00:00",
        finished_at="2026-11-29T10:00:01+00:00",
        source={"data_dir": "/opt/data", "host": "pod"},
        excludes=[".env"],
        databases=[DatabaseRecord("state.db", DIGEST, 4096, 0o644, "ok", {"t": 3}, "backup", 0.1)],
        files=[FileRecord("SOUL.md", DIGEST, 12, 0o600, 1, 2)],
    )


def test_round_trip_keeps_every_field() -> None:
    manifest = sample()
    assert decode_manifest(encode_manifest(manifest), "here") == manifest


def test_a_changed_value_that_still_parses_is_caught() -> None:
    document = json.loads(encode_manifest(sample()))
    document["manifest"]["databases"][0]["tables"]["t"] = 4
    with pytest.raises(RuntimeFailure, match=r"manifests/x\.json is corrupt: its sha256"):
        decode_manifest(json.dumps(document).encode(), "manifests/x.json")


def test_garbage_is_reported_with_its_name() -> None:
    with pytest.raises(RuntimeFailure, match="manifest m1 is corrupt"):
        decode_manifest(b"\x00\x01 not json", "m1")


def test_ids_sort_by_time_and_parse_back() -> None:
    start = datetime(2026, 1, 31, 23, 59, 59, tzinfo=UTC)
    ids = [new_snapshot_id(start + timedelta(seconds=s)) for s in (0, 1, 3600, 86400 * 40)]
    assert sorted(ids) == ids
    assert snapshot_time(ids[0]) == start


def test_blob_keys_round_trip_and_reject_partial_files() -> None:
    assert digest_from_blob_key(blob_key(DIGEST)) == DIGEST
    assert digest_from_blob_key(f"blobs/ab/.partial-{DIGEST}.zst.x1y2") is None
