"""Replicas in an S3 bucket (``s3://bucket/prefix``): AWS or a self-hosted S3 at an endpoint.

The keys come from the environment the standard AWS way (``AWS_ACCESS_KEY_ID``, ...): the
same environment Litestream gets, never its config file nor its arguments. A self-hosted S3
(SeaweedFS, MinIO, Ceph) serves path-style buckets, so an endpoint implies path-style.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlencode

from hermes_runtime.backup.replicas.base import REPLICA_PREFIX, Replicas
from hermes_runtime.common.errors import RuntimeFailure

DEFAULT_REGION = "us-east-1"


@dataclass(frozen=True)
class S3Replicas(Replicas):
    """One agent's replicas under the key prefix ``<prefix>/litestream/<agent>/`` of ``bucket``."""

    url: str
    bucket: str
    prefix: str  # the target's key prefix (may be empty)
    agent: str
    endpoint: str | None = None
    region: str = DEFAULT_REGION
    env: Mapping[str, str] = field(default_factory=dict, repr=False)

    def replicas_root(self) -> str:
        return "/".join(part for part in (self.prefix, REPLICA_PREFIX, self.agent) if part) + "/"

    def replicas_url(self) -> str:
        return f"s3://{self.bucket}/" + "/".join(p for p in (self.prefix, REPLICA_PREFIX) if p)

    def replica_url(self, relpath: str) -> str:
        query: dict[str, str] = {"region": self.region}
        if self.endpoint:
            query.update(endpoint=self.endpoint, forcePathStyle="true")
        return f"s3://{self.bucket}/{self.replica_path(relpath)}?{urlencode(query)}"

    def replica_config(self, relpath: str) -> dict[str, Any]:
        config: dict[str, Any] = {
            "type": "s3",
            "bucket": self.bucket,
            "path": self.replica_path(relpath),
            "region": self.region,
        }
        if self.endpoint:
            config.update({"endpoint": self.endpoint, "force-path-style": True})
        return config

    def check_reachable(self) -> None:
        """Nothing to check before Litestream's first upload, which says what is wrong."""

    def ltx_keys(self) -> list[str]:
        from botocore.exceptions import BotoCoreError, ClientError

        prefix = self.replicas_root()
        keys: list[str] = []
        try:
            pages = self._client.get_paginator("list_objects_v2").paginate(
                Bucket=self.bucket, Prefix=prefix
            )
            for page in pages:
                keys += [str(item["Key"])[len(prefix) :] for item in page.get("Contents", [])]
        except (BotoCoreError, ClientError) as exc:
            raise RuntimeFailure(
                f"Litestream replicas {self.url}: cannot list the keys under {prefix}: {exc}"
            ) from exc
        return keys

    def read_header(self, key: str, size: int) -> bytes:
        from botocore.exceptions import BotoCoreError, ClientError

        name = self.replicas_root() + key
        try:
            body = self._client.get_object(
                Bucket=self.bucket, Key=name, Range=f"bytes=0-{size - 1}"
            )["Body"]
            return bytes(body.read())
        except (BotoCoreError, ClientError) as exc:
            raise RuntimeFailure(
                f"Litestream replicas {self.url}: cannot read file {name}: {exc}"
            ) from exc

    @functools.cached_property
    def _client(self) -> Any:
        """A client with the keys of ``env`` (the ones Litestream gets), if any."""
        import boto3
        from botocore.config import Config

        return boto3.client(
            "s3",
            endpoint_url=self.endpoint,
            region_name=self.region,
            aws_access_key_id=self.env.get("AWS_ACCESS_KEY_ID") or None,
            aws_secret_access_key=self.env.get("AWS_SECRET_ACCESS_KEY") or None,
            aws_session_token=self.env.get("AWS_SESSION_TOKEN") or None,
            config=Config(
                s3={"addressing_style": "path" if self.endpoint else "auto"},
                retries={"max_attempts": 3},
                connect_timeout=10,
            ),
        )
