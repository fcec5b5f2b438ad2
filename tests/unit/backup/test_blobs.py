"""One-pass hash + compress of a source, around the chunk size where the hash thread starts."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest
import zstandard

from hermes_runtime.backup.blobs import CHUNK, spool_compressed


@pytest.mark.parametrize("size", [0, 1, CHUNK - 1, CHUNK, CHUNK + 1, 2 * CHUNK, 2 * CHUNK + 12345])
def test_digest_body_and_progress_match_the_source(tmp_path: Path, size: int) -> None:
    data = os.urandom(size // 2) + b"a" * (size - size // 2)  # half noise, half compressible
    source = tmp_path / "source.bin"
    source.write_bytes(data)
    reported: list[int] = []
    spooled = spool_compressed(source, tmp_path / "spool.zst", reported.append)
    assert spooled.digest == hashlib.sha256(data).hexdigest()
    assert spooled.raw_size == size and sum(reported) == size
    assert all(0 < n <= CHUNK for n in reported) or size == 0
    body = (tmp_path / "spool.zst").read_bytes()
    assert spooled.compressed_size == len(body)
    reader = zstandard.ZstdDecompressor().stream_reader(body, read_across_frames=True)
    assert reader.read() == data
    if size >= 2 * CHUNK:
        assert len(body) < size * 0.75  # the compressible half really got compressed
