"""The replicas of a backup target, chosen once from its URL: a folder or an S3 bucket.

Two URLs name them: the target itself (``backup replicate --target T`` writes ``T/litestream``)
and the replicas' own folder (``backup restore --replicas T/litestream``), which a restore
reads only when asked to.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from urllib.parse import urlsplit, urlunsplit

from hermes_runtime.backup.agents import LEGACY, checked_agent
from hermes_runtime.backup.replicas.base import REPLICA_PREFIX, Replicas
from hermes_runtime.backup.replicas.files import FileReplicas
from hermes_runtime.backup.replicas.s3 import DEFAULT_REGION, S3Replicas
from hermes_runtime.common.errors import RuntimeFailure


def replica_location(
    url: str,
    s3_endpoint: str | None = None,
    environ: Mapping[str, str] | None = None,
    agent: str = LEGACY,
) -> Replicas:
    """``agent``'s replicas on the target ``file:///path`` or ``s3://bucket/prefix``.

    ``environ`` (the process's by default) is what Litestream runs with; an S3 target's
    endpoint (unless ``s3_endpoint``) and region come from it, the AWS way.
    """
    return _replicas(url, url, s3_endpoint, os.environ if environ is None else environ, agent)


def replicas_location(
    url: str,
    s3_endpoint: str | None = None,
    environ: Mapping[str, str] | None = None,
    agent: str = LEGACY,
) -> Replicas:
    """The replicas at ``url``: what ``backup replicate --target T`` writes, ``T/litestream``.

    Why a URL of their own, not the target: a restore reads replicas only when asked to
    (``backup restore --replicas``). Refused unless it names such a folder: ``file:///path/
    litestream`` or ``s3://bucket[/prefix]/litestream`` (a trailing or doubled slash before
    ``litestream`` is what ``$(TARGET)/litestream`` gives for a target ending in ``/``).
    """
    refused = RuntimeFailure(
        f"--replicas {url}: expected file:///path/{REPLICA_PREFIX} or "
        f"s3://bucket/prefix/{REPLICA_PREFIX} (the target of backup replicate, "
        f"then /{REPLICA_PREFIX})"
    )
    checked_agent(agent)
    parts = urlsplit(url)
    path = parts.path.rstrip("/")
    named = path.startswith("/") and path.rsplit("/", 1)[-1] == REPLICA_PREFIX
    if parts.query or parts.fragment or not named:
        raise refused
    target = urlunsplit((parts.scheme, parts.netloc, path[: -len(REPLICA_PREFIX)], "", ""))
    env = os.environ if environ is None else environ
    try:
        found = _replicas(target, target, s3_endpoint, env, agent)
    except RuntimeFailure:
        raise refused from None
    return _replicas(target, found.replicas_url(), s3_endpoint, env, agent)


def _replicas(
    target: str, url: str, s3_endpoint: str | None, environ: Mapping[str, str], agent: str
) -> Replicas:
    """The replicas of ``target``, named ``url`` in messages; the one place a kind is chosen."""
    checked_agent(agent)
    env = dict(environ)
    parts = urlsplit(target)
    if parts.scheme == "file" and parts.path and not parts.netloc:
        return FileReplicas(url, parts.path.rstrip("/") or "/", agent, env)
    if parts.scheme == "s3" and parts.netloc:
        endpoint = s3_endpoint or env.get("AWS_ENDPOINT_URL_S3") or env.get("AWS_ENDPOINT_URL")
        region = env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION") or DEFAULT_REGION
        prefix = parts.path.strip("/")
        return S3Replicas(url, parts.netloc, prefix, agent, endpoint or None, region, env)
    raise RuntimeFailure(f"--target {target}: expected file:///path or s3://bucket/prefix")
