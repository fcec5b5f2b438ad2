"""Where backups live: a mounted folder (``file://``) or any S3-compatible store (``s3://``).

Both targets offer the same small key/value surface so the backup logic never
knows which one it talks to. Every write is all-or-nothing: a file target
writes a temp file and renames it, S3 makes an object visible only when its
upload completes. That is what lets ``create`` write the manifest last and
be sure an interrupted run leaves nothing a reader would pick.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, Protocol, TypeVar
from urllib.parse import urlparse

from hermes_runtime.common.atomic import fsync_dir
from hermes_runtime.common.errors import RuntimeFailure

T = TypeVar("T")
TEMP_MARKER = ".partial-"


@dataclass(frozen=True)
class StoredObject:
    """One object in a target: its key, size in bytes and last-modified time (epoch)."""

    key: str
    size: int
    modified: float


class Target(Protocol):
    """The operations backup needs from a store. Keys use ``/`` separators."""

    url: str

    def exists(self, key: str) -> bool: ...
    def put_file(self, key: str, source: Path) -> None: ...
    def spool_dir(self) -> Path | None: ...
    def put_bytes(self, key: str, data: bytes) -> None: ...
    def get_bytes(self, key: str) -> bytes: ...
    def open_stream(self, key: str) -> AbstractContextManager[BinaryIO]: ...
    def list_objects(self, prefix: str) -> Iterator[StoredObject]: ...
    def delete(self, key: str) -> None: ...


class FileTarget:
    """A folder, typically a backup PVC mounted at ``/backup``."""

    def __init__(self, url: str, root: Path) -> None:
        self.url = url
        self.root = root

    def _path(self, key: str) -> Path:
        return self.root.joinpath(*key.split("/"))

    def _check_root(self) -> None:
        if not self.root.is_dir():
            raise RuntimeFailure(f"backup target {self.url}: {self.root} is not a directory")

    def exists(self, key: str) -> bool:
        return self._path(key).is_file()

    def spool_dir(self) -> Path:
        """Spool files created here are moved into place by a rename, not copied."""
        self._check_root()
        spool = self.root / "blobs"
        spool.mkdir(exist_ok=True)
        return spool

    def put_file(self, key: str, source: Path) -> None:
        path = self._path(key)
        if source.parent == self.root / "blobs" and source.name.startswith(TEMP_MARKER):
            try:
                with source.open("rb") as fh:
                    os.fsync(fh.fileno())
                path.parent.mkdir(parents=True, exist_ok=True)
                os.replace(source, path)
                fsync_dir(path.parent)
                return
            except OSError as exc:
                raise RuntimeFailure(
                    f"backup target {self.url}: cannot write {key}: {exc}"
                ) from exc
        with source.open("rb") as src:
            self._write(key, lambda dst: shutil.copyfileobj(src, dst, 1 << 20))

    def put_bytes(self, key: str, data: bytes) -> None:
        self._write(key, lambda dst: dst.write(data))

    def _write(self, key: str, fill: Callable[[Any], object]) -> None:
        self._check_root()
        path = self._path(key)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp_name = tempfile.mkstemp(prefix=f"{TEMP_MARKER}{path.name}.", dir=path.parent)
        except OSError as exc:
            raise RuntimeFailure(f"backup target {self.url}: cannot write {key}: {exc}") from exc
        tmp = Path(tmp_name)
        try:
            with os.fdopen(fd, "wb") as dst:
                fill(dst)
                dst.flush()
                os.fsync(dst.fileno())
            os.chmod(tmp, 0o644)
            os.replace(tmp, path)
            fsync_dir(path.parent)
        except OSError as exc:
            with contextlib.suppress(FileNotFoundError):
                tmp.unlink()
            raise RuntimeFailure(f"backup target {self.url}: cannot write {key}: {exc}") from exc

    def get_bytes(self, key: str) -> bytes:
        try:
            return self._path(key).read_bytes()
        except OSError as exc:
            raise RuntimeFailure(f"backup target {self.url}: cannot read {key}: {exc}") from exc

    @contextlib.contextmanager
    def open_stream(self, key: str) -> Iterator[BinaryIO]:
        try:
            fh = self._path(key).open("rb")
        except OSError as exc:
            raise RuntimeFailure(f"backup target {self.url}: cannot read {key}: {exc}") from exc
        with fh:
            yield fh

    def list_objects(self, prefix: str) -> Iterator[StoredObject]:
        self._check_root()
        base = self._path(prefix.rstrip("/")) if prefix else self.root
        if base.is_file():  # a prefix naming one object
            st = base.stat()
            yield StoredObject(prefix, st.st_size, st.st_mtime)
            return
        if not base.is_dir():
            return
        for dirpath, _dirs, files in os.walk(base):
            for name in sorted(files):
                full = Path(dirpath, name)
                with contextlib.suppress(FileNotFoundError):
                    st = full.stat()
                    key = full.relative_to(self.root).as_posix()
                    yield StoredObject(key, st.st_size, st.st_mtime)

    def delete(self, key: str) -> None:
        try:
            self._path(key).unlink(missing_ok=True)
        except OSError as exc:
            raise RuntimeFailure(f"backup target {self.url}: cannot delete {key}: {exc}") from exc


class S3Target:
    """A bucket and prefix on any S3-compatible store, through boto3.

    The endpoint comes from ``--s3-endpoint`` or ``AWS_ENDPOINT_URL``;
    credentials from the standard AWS chain, so they never appear in
    process arguments.
    """

    def __init__(self, url: str, bucket: str, prefix: str, endpoint: str | None) -> None:
        import boto3
        from botocore.config import Config

        self.url = url
        self.bucket = bucket
        self.prefix = prefix.strip("/")
        config = Config(
            retries={"max_attempts": 3, "mode": "standard"},
            connect_timeout=5,
            read_timeout=60,
            s3={"addressing_style": "path"},
            signature_version="s3v4",
        )
        region = os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or "us-east-1"
        self.client = boto3.client("s3", endpoint_url=endpoint, region_name=region, config=config)

    def _key(self, key: str) -> str:
        return f"{self.prefix}/{key}" if self.prefix else key

    def _call(self, what: str, key: str, action: Callable[[], T]) -> T:
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            return action()
        except ClientError as exc:
            err = exc.response.get("Error", {})
            code, message = err.get("Code", "?"), err.get("Message", "")
            raise RuntimeFailure(
                f"backup target {self.url}: {what} {key} failed: {code} {message}".rstrip()
            ) from exc
        except BotoCoreError as exc:
            raise RuntimeFailure(f"backup target {self.url}: {what} {key} failed: {exc}") from exc

    def exists(self, key: str) -> bool:
        from botocore.exceptions import ClientError

        def head() -> bool:
            try:
                self.client.head_object(Bucket=self.bucket, Key=self._key(key))
            except ClientError as exc:
                if exc.response.get("Error", {}).get("Code") in ("404", "NoSuchKey", "NotFound"):
                    return False
                raise
            return True

        return self._call("check", key, head)

    def put_file(self, key: str, source: Path) -> None:
        self._call(
            "upload", key, lambda: self.client.upload_file(str(source), self.bucket, self._key(key))
        )

    def spool_dir(self) -> None:
        return None

    def put_bytes(self, key: str, data: bytes) -> None:
        self._call(
            "upload",
            key,
            lambda: self.client.put_object(Bucket=self.bucket, Key=self._key(key), Body=data),
        )

    def get_bytes(self, key: str) -> bytes:
        def fetch() -> bytes:
            body = self.client.get_object(Bucket=self.bucket, Key=self._key(key))["Body"]
            return bytes(body.read())

        return self._call("download", key, fetch)

    @contextlib.contextmanager
    def open_stream(self, key: str) -> Iterator[BinaryIO]:
        response = self._call(
            "download", key, lambda: self.client.get_object(Bucket=self.bucket, Key=self._key(key))
        )
        body = response["Body"]
        try:
            yield body  # type: ignore[misc]
        finally:
            body.close()

    def list_objects(self, prefix: str) -> Iterator[StoredObject]:
        paginator = self.client.get_paginator("list_objects_v2")
        full_prefix = self._key(prefix)
        strip = len(self.prefix) + 1 if self.prefix else 0
        pages = self._call(
            "list", prefix, lambda: list(paginator.paginate(Bucket=self.bucket, Prefix=full_prefix))
        )
        for page in pages:
            for obj in page.get("Contents", []):
                modified = (
                    obj["LastModified"].timestamp() if obj.get("LastModified") else time.time()
                )
                yield StoredObject(obj["Key"][strip:], int(obj["Size"]), modified)

    def delete(self, key: str) -> None:
        self._call(
            "delete", key, lambda: self.client.delete_object(Bucket=self.bucket, Key=self._key(key))
        )


def open_plain_target(url: str, s3_endpoint: str | None = None) -> Target:
    """Parse ``file:///path`` or ``s3://bucket/prefix`` into a target (no encryption)."""
    parsed = urlparse(url)
    if parsed.scheme == "file":
        if parsed.netloc not in ("", "localhost") or not parsed.path.startswith("/"):
            raise RuntimeFailure(
                f"--target {url}: a file target needs an absolute path: file:///backup"
            )
        return FileTarget(url, Path(parsed.path))
    if parsed.scheme == "s3":
        if not parsed.netloc:
            raise RuntimeFailure(f"--target {url}: an S3 target needs a bucket: s3://bucket/prefix")
        endpoint = (
            s3_endpoint
            or os.environ.get("AWS_ENDPOINT_URL_S3")
            or os.environ.get("AWS_ENDPOINT_URL")
        )
        return S3Target(url, parsed.netloc, parsed.path, endpoint or None)
    raise RuntimeFailure(
        f"--target {url}: unsupported scheme {parsed.scheme!r}; use file:// or s3://"
    )
