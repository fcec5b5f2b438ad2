"""Content-addressed blobs: the key is the sha256 of the raw bytes, the body is zstd.

Hashing and compressing happen in one read of the source, into a local
spool file, so what gets uploaded is exactly what was hashed even when the
source file changes underneath (a log being appended, for instance).
Reading a blob back re-hashes the decompressed bytes and refuses a mismatch.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import zstandard

from hermes_runtime.backup.crypto import SealError
from hermes_runtime.backup.manifest import blob_key
from hermes_runtime.backup.target import Target
from hermes_runtime.common.errors import RuntimeFailure

CHUNK = 4 << 20
ZSTD_LEVEL = 1  # measured: level 3 costs 2-4x the time of level 1 for 1-2 points of ratio


@dataclass(frozen=True)
class Spooled:
    """A compressed copy of one source, ready to upload."""

    digest: str
    raw_size: int
    compressed_size: int
    path: Path


def spool_compressed(
    source: Path, spool: Path, on_chunk: Callable[[int], None] | None = None
) -> Spooled:
    """Read ``source`` once: hash it and write its zstd body to ``spool``."""
    with spool.open("wb") as out:
        digest, raw = compress_into(source, out, on_chunk)
        out.flush()
    return Spooled(digest, raw, spool.stat().st_size, spool)


def compress_into(
    source: Path, out: BinaryIO, on_chunk: Callable[[int], None] | None = None
) -> tuple[str, int]:
    """Stream ``source`` through sha256 and zstd into ``out``; return (sha256, raw size).

    Both hashlib and zstd release the GIL on large buffers, so for big
    sources the hash of a chunk runs in a helper thread while the main
    thread compresses the same chunk: the pass costs about the slower of
    the two instead of their sum (measured on a 526 MB snapshot: see the
    Backup section of docs/benchmarks.md). Small files stay single-threaded.
    ``on_chunk`` gets the raw size of each chunk read (progress of big files).
    """
    report = on_chunk or (lambda _size: None)
    sha = hashlib.sha256()
    raw = 0
    compressor = zstandard.ZstdCompressor(level=ZSTD_LEVEL)
    with (
        source.open("rb") as src,
        compressor.stream_writer(out, closefd=False) as writer,
        ThreadPoolExecutor(max_workers=1, thread_name_prefix="sha256") as hasher,
    ):
        chunk = src.read(CHUNK)
        if len(chunk) < CHUNK:  # one small read: no thread worth starting
            sha.update(chunk)
            writer.write(chunk)
            report(len(chunk))
            return sha.hexdigest(), len(chunk)
        while chunk:
            hashing = hasher.submit(sha.update, chunk)
            writer.write(chunk)
            raw += len(chunk)
            hashing.result()
            report(len(chunk))
            chunk = src.read(CHUNK)
    return sha.hexdigest(), raw


class BlobCorrupt(RuntimeFailure):
    """A blob's content does not hash to its key."""


def _read(reader: Any, key: str, url: str) -> bytes:
    """One chunk of a blob; a bad body or a dropped connection becomes a RuntimeFailure."""
    try:
        return bytes(reader.read(CHUNK))
    except (zstandard.ZstdError, SealError) as exc:
        raise BlobCorrupt(f"blob {key} is corrupt: {exc}") from exc
    except OSError:
        raise
    except Exception as exc:  # botocore/urllib3 errors while streaming the body
        raise RuntimeFailure(f"backup target {url}: download {key} failed: {exc}") from exc


def restore_blob(target: Target, digest: str, dest: Path, mode: int = 0o644) -> int:
    """Decompress blob ``digest`` into the new file ``dest``, checking its sha256.

    Returns the raw size. Raises ``BlobCorrupt`` naming the blob on a
    mismatch or an undecodable body; OSError (disk full) passes through.
    """
    key = blob_key(digest)
    sha = hashlib.sha256()
    size = 0
    fd = os.open(dest, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    with os.fdopen(fd, "wb") as out, target.open_stream(key) as body:
        reader = zstandard.ZstdDecompressor().stream_reader(body, read_across_frames=True)
        while chunk := _read(reader, key, target.url):
            sha.update(chunk)
            size += len(chunk)
            out.write(chunk)
        out.flush()
        os.fsync(out.fileno())
    if sha.hexdigest() != digest:
        raise BlobCorrupt(f"blob {key} is corrupt: its content hashes to {sha.hexdigest()}")
    return size


def check_blob(target: Target, digest: str) -> int:
    """Download, decompress and hash blob ``digest`` without keeping it; return its size."""
    key = blob_key(digest)
    sha = hashlib.sha256()
    size = 0
    with target.open_stream(key) as body:
        reader = zstandard.ZstdDecompressor().stream_reader(body, read_across_frames=True)
        while chunk := _read(reader, key, target.url):
            sha.update(chunk)
            size += len(chunk)
    if sha.hexdigest() != digest:
        raise BlobCorrupt(f"blob {key} is corrupt: its content hashes to {sha.hexdigest()}")
    return size
