"""Opening a target: the URL picks the store, the secret (if any) adds encryption."""

from __future__ import annotations

from hermes_runtime.backup.crypto import with_encryption
from hermes_runtime.backup.target import Target, open_plain_target


def open_target(
    url: str, s3_endpoint: str | None = None, encryption_secret: str | None = None
) -> Target:
    """Open ``file:///path`` or ``s3://bucket/prefix``, encrypted when a secret is given.

    The CLI passes the secret from ``HERMES_BACKUP_ENCRYPTION_KEY`` (never an
    argument). A target that holds encrypted snapshots refuses to be opened
    without the right key, and a plain one that holds snapshots refuses a key.
    """
    return with_encryption(open_plain_target(url, s3_endpoint), encryption_secret)
