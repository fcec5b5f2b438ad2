"""Optional client-side encryption: AES-256-GCM around every object a target stores.

``EncryptedTarget`` wraps any target: bodies are sealed on the way out and
opened (and authenticated) on the way in, in frames of 4 MiB so large blobs
stream. Keys (object names) stay as they are, so deduplication still works;
the price is that blob names are sha256 of the plaintext, which lets someone
with access to the bucket confirm that a file THEY ALREADY HAVE is in the
backup (documented in docs/backup.md). Everything else (file names, sizes,
row counts in manifests, contents) is unreadable without the key.

Sealed format: ``MAGIC | 8-byte nonce prefix | frames``; a frame is
``4-byte big-endian length | AES-GCM(ciphertext + tag)`` with nonce
``prefix | counter`` and associated data ``counter | last-flag``, so frames
cannot be reordered, dropped or truncated without detection.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import io
import json
import os
import struct
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from hermes_runtime.backup.target import StoredObject, Target
from hermes_runtime.common.errors import RuntimeFailure

KEY_ENV = "HERMES_BACKUP_ENCRYPTION_KEY"
MIN_SECRET_CHARS = 32
MAGIC = b"HRBKENC1"
FRAME = 4 << 20
MARKER_KEY = "encryption.json"
CIPHER_NAME = "aes-256-gcm"


class SealError(Exception):
    """A sealed body failed authentication: corrupt, truncated or another key."""


def derive_key(secret: str) -> bytes:
    """32 bytes from the operator's secret (a random string, e.g. ``openssl rand -base64 32``)."""
    if len(secret) < MIN_SECRET_CHARS:
        raise RuntimeFailure(
            f"{KEY_ENV} is too short ({len(secret)} characters): use at least "
            f"{MIN_SECRET_CHARS} random characters, e.g. `openssl rand -base64 32`"
        )
    hkdf = HKDF(algorithm=hashes.SHA256(), length=32, salt=b"hermes-backup/v1", info=b"aes")
    return hkdf.derive(secret.encode())


def _aad(counter: int, last: bool) -> bytes:
    return struct.pack(">I?", counter, last)


def _nonce(prefix: bytes, counter: int) -> bytes:
    return prefix + struct.pack(">I", counter)


def seal_stream(key: bytes, src: BinaryIO, dst: BinaryIO) -> None:
    aead = AESGCM(key)
    prefix = os.urandom(8)
    dst.write(MAGIC + prefix)
    counter = 0
    chunk = src.read(FRAME)
    while True:
        following = src.read(FRAME) if chunk else b""
        last = not following
        sealed = aead.encrypt(_nonce(prefix, counter), chunk, _aad(counter, last))
        dst.write(struct.pack(">I", len(sealed)) + sealed)
        if last:
            return
        chunk, counter = following, counter + 1


def _read_exactly(raw: Any, size: int) -> bytes:
    parts, missing = [], size
    while missing:
        piece = raw.read(missing)
        if not piece:
            break
        parts.append(piece)
        missing -= len(piece)
    return b"".join(parts)


class OpenedStream(io.RawIOBase):
    """A readable view of the plaintext of a sealed stream, checked frame by frame."""

    def __init__(self, key: bytes, raw: Any) -> None:
        self._aead = AESGCM(key)
        self._raw = raw
        header = _read_exactly(raw, len(MAGIC) + 8)
        if header[: len(MAGIC)] != MAGIC:
            raise SealError("not an encrypted hermes-runtime object")
        self._prefix = header[len(MAGIC) :]
        self._counter = 0
        self._buffer = b""
        self._done = False

    def readable(self) -> bool:
        return True

    def _next_frame(self) -> None:
        length_bytes = _read_exactly(self._raw, 4)
        if len(length_bytes) < 4:
            raise SealError("truncated: the last frame is missing")
        (length,) = struct.unpack(">I", length_bytes)
        sealed = _read_exactly(self._raw, length)
        nonce = _nonce(self._prefix, self._counter)
        for last in (False, True):
            try:
                self._buffer = self._aead.decrypt(nonce, sealed, _aad(self._counter, last))
            except InvalidTag:
                continue
            self._done = last
            self._counter += 1
            return
        raise SealError(f"frame {self._counter} fails authentication (corrupt, or another key)")

    def read(self, size: int = -1) -> bytes:
        while not self._buffer and not self._done:
            self._next_frame()
        if size is None or size < 0:
            parts = [self._buffer]
            self._buffer = b""
            while not self._done:
                self._next_frame()
                parts.append(self._buffer)
                self._buffer = b""
            return b"".join(parts)
        out, self._buffer = self._buffer[:size], self._buffer[size:]
        return out

    def readinto(self, buffer: Any) -> int:
        data = self.read(len(buffer))
        buffer[: len(data)] = data
        return len(data)


def open_bytes(key: bytes, data: bytes) -> bytes:
    return OpenedStream(key, io.BytesIO(data)).read()


def seal_bytes(key: bytes, data: bytes) -> bytes:
    out = io.BytesIO()
    seal_stream(key, io.BytesIO(data), out)
    return out.getvalue()


class EncryptedTarget:
    """A target whose stored bodies are sealed with AES-256-GCM; names are unchanged."""

    def __init__(self, inner: Target, key: bytes) -> None:
        self.inner = inner
        self.url = inner.url
        self._key = key

    def exists(self, key: str) -> bool:
        return self.inner.exists(key)

    def spool_dir(self) -> Path | None:
        return self.inner.spool_dir()

    def put_file(self, key: str, source: Path) -> None:
        sealed = source.with_name(source.name + ".sealed")
        try:
            with source.open("rb") as src, sealed.open("wb") as dst:
                seal_stream(self._key, src, dst)
            self.inner.put_file(key, sealed)
        finally:
            sealed.unlink(missing_ok=True)

    def put_bytes(self, key: str, data: bytes) -> None:
        self.inner.put_bytes(key, seal_bytes(self._key, data))

    def get_bytes(self, key: str) -> bytes:
        try:
            return open_bytes(self._key, self.inner.get_bytes(key))
        except SealError as exc:
            raise RuntimeFailure(f"{self.url}/{key} is corrupt: {exc}") from exc

    @contextlib.contextmanager
    def open_stream(self, key: str) -> Iterator[BinaryIO]:
        with self.inner.open_stream(key) as raw:
            try:
                opened = OpenedStream(self._key, raw)
            except SealError as exc:
                raise RuntimeFailure(f"{self.url}/{key} is corrupt: {exc}") from exc
            yield opened  # type: ignore[misc]

    def list_objects(self, prefix: str) -> Iterator[StoredObject]:
        return self.inner.list_objects(prefix)

    def delete(self, key: str) -> None:
        self.inner.delete(key)


def _key_check(key: bytes) -> str:
    return hmac.new(key, b"hermes-backup key check", hashlib.sha256).hexdigest()


def with_encryption(target: Target, secret: str | None) -> Target:
    """Wrap ``target`` when a key is given; refuse to mix encrypted and plain snapshots."""
    # A listing, not a HEAD: S3 answers a HEAD with a bare 403, a listing names
    # the reason (SignatureDoesNotMatch, InvalidAccessKeyId, NoSuchBucket).
    has_marker = any(obj.key == MARKER_KEY for obj in target.list_objects(MARKER_KEY))
    if secret is None:
        if has_marker:
            raise RuntimeFailure(
                f"backup target {target.url} is encrypted: set {KEY_ENV} to its key"
            )
        return target
    key = derive_key(secret)
    if not has_marker:
        if next(iter(target.list_objects("manifests/")), None) is not None:
            raise RuntimeFailure(
                f"backup target {target.url} holds unencrypted snapshots: "
                f"unset {KEY_ENV} or use a new target"
            )
        record = {"cipher": CIPHER_NAME, "key_check": _key_check(key)}
        target.put_bytes(MARKER_KEY, json.dumps(record).encode())
        return EncryptedTarget(target, key)
    try:
        record = json.loads(target.get_bytes(MARKER_KEY))
        expected = str(record["key_check"])
    except (ValueError, KeyError, TypeError) as exc:
        raise RuntimeFailure(f"{target.url}/{MARKER_KEY} is corrupt: {exc}") from exc
    if not hmac.compare_digest(expected, _key_check(key)):
        raise RuntimeFailure(
            f"backup target {target.url} was encrypted with another key than {KEY_ENV}"
        )
    return EncryptedTarget(target, key)
