"""Helpers shared by the backup integration tests: targets, data dirs, the CLI, SQLite reads."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import secrets
import signal
import stat
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from support.restic import TEST_PASSWORD
from support.seaweedfs import SeaweedServer

from hermes_runtime.backup import open_repository
from hermes_runtime.backup.agents import LEGACY
from hermes_runtime.backup.manifest import MANIFEST_RELPATH
from hermes_runtime.backup.restic import restic_binary
from hermes_runtime.common.sqlite import connect

Manifest = dict[str, Any]


@dataclass
class BackupTarget:
    """A target URL plus what a CLI process needs to reach it."""

    url: str
    env: dict[str, str]
    kind: str
    root: Path | None = None  # the folder of a file:// target
    server: SeaweedServer | None = None
    bucket: str = ""

    def object_keys(self, prefix: str = "") -> list[str]:
        if self.root is not None:
            base = self.root
            return sorted(
                p.relative_to(base).as_posix()
                for p in base.rglob("*")
                if p.is_file() and p.relative_to(base).as_posix().startswith(prefix)
            )
        assert self.server is not None
        client = self.server.client()
        keys: list[str] = []
        for page in client.get_paginator("list_objects_v2").paginate(
            Bucket=self.bucket, Prefix=f"agent/{prefix}"
        ):
            keys += [o["Key"].removeprefix("agent/") for o in page.get("Contents", [])]
        return sorted(keys)

    def read(self, key: str) -> bytes:
        if self.root is not None:
            return (self.root / key).read_bytes()
        assert self.server is not None
        body = self.server.client().get_object(Bucket=self.bucket, Key=f"agent/{key}")["Body"]
        return bytes(body.read())

    def write(self, key: str, data: bytes) -> None:
        if self.root is not None:
            (self.root / key).write_bytes(data)
            return
        assert self.server is not None
        self.server.client().put_object(Bucket=self.bucket, Key=f"agent/{key}", Body=data)


# restic encrypts every repository: each target gets a password through restic's variable.
PASSWORD_ENV = {"RESTIC_PASSWORD": TEST_PASSWORD}


def file_target(tmp_path: Path) -> BackupTarget:
    root = tmp_path / "backup-volume"
    root.mkdir()
    return BackupTarget(f"file://{root}", dict(PASSWORD_ENV), "file", root=root)


def s3_target(server: SeaweedServer) -> BackupTarget:
    bucket = f"backups-{secrets.token_hex(4)}"
    server.create_bucket(bucket)
    env = {**server.env(), **PASSWORD_ENV}
    return BackupTarget(f"s3://{bucket}/agent", env, "s3", server=server, bucket=bucket)


def make_database(path: Path, rows: int, payload: int = 200) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    conn = connect(path)
    conn.execute("CREATE TABLE IF NOT EXISTS messages(id INTEGER PRIMARY KEY, body TEXT)")
    with conn:
        conn.executemany(
            "INSERT INTO messages(body) VALUES (?)",
            ((f"message {i} " + "x" * payload,) for i in range(rows)),
        )
    conn.close()


def tree_fingerprint(root: Path, skip_databases: bool = True) -> dict[str, str]:
    """Path -> content hash (files), link target (symlinks), 'dir' + mode (folders)."""
    result: dict[str, str] = {}
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root).as_posix()
        st = path.lstat()
        if stat.S_ISLNK(st.st_mode):
            result[rel] = "link:" + os.readlink(path)
        elif stat.S_ISDIR(st.st_mode):
            result[rel] = f"dir:{stat.S_IMODE(st.st_mode):o}"
        elif skip_databases and (rel.endswith(".db") or "-wal" in rel or "-shm" in rel):
            continue
        else:
            digest = hashlib.sha256(path.read_bytes()).hexdigest()
            result[rel] = f"{digest}:{stat.S_IMODE(st.st_mode):o}"
    return result


def run_cli(
    *args: str, env: dict[str, str] | None = None, timeout: float = 300
) -> subprocess.CompletedProcess[str]:
    full_env = {**os.environ, **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "hermes_runtime", "backup", *args],
        capture_output=True,
        text=True,
        env=full_env,
        timeout=timeout,
        check=False,
    )


def create_json(target: BackupTarget, data_dir: Path, *extra: str) -> dict:
    """``backup create --json`` that must succeed; returns its summary."""
    result = run_cli(
        "create",
        "--data-dir",
        str(data_dir),
        "--target",
        target.url,
        "--json",
        *extra,
        env=target.env,
    )
    assert result.returncode == 0, result.stderr
    summary: dict = json.loads(result.stdout)
    return summary


def rows(db: Path, sql: str) -> list[tuple[object, ...]]:
    conn = connect(db, readonly=True)
    try:
        return [tuple(r) for r in conn.execute(sql).fetchall()]
    finally:
        conn.close()


def forced_restore_over_data(
    target: BackupTarget, tmp_path: Path
) -> tuple[subprocess.CompletedProcess[str], Path]:
    """``restore --force`` into a dir that holds data; returns the run and the dir."""
    existing = tmp_path / "existing"
    existing.mkdir()
    (existing / "state.txt").write_text("before")
    done = run_cli(
        "restore", "--target", target.url, "--data-dir", str(existing), "--force", env=target.env
    )
    return done, existing


def assert_left_as_it_was(existing: Path) -> None:
    """The dir of ``forced_restore_over_data`` after a failed restore: exactly as before."""
    assert sorted(p.name for p in existing.iterdir()) == ["state.txt"]
    assert (existing / "state.txt").read_text() == "before"


def restic(target: BackupTarget, *args: str, cwd: Path | None = None) -> str:
    """restic itself on the target's repository (a folder or a bucket); must succeed."""
    env = {**os.environ, **target.env}
    repo = open_repository(target.url, environ=env)
    done = subprocess.run(
        [restic_binary(), "-r", repo.repository, *repo.options, *args],
        env=repo.env,
        cwd=cwd,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, f"restic {args[0]}: {done.stderr}"
    return done.stdout


def restage(target: BackupTarget, work: Path, change: Callable[[Path, Manifest], None]) -> str:
    """A new latest snapshot: the latest one's tree with `change` applied, by restic alone.

    What anyone holding the repository password can write. Returns the new snapshot's id.
    """
    tree = work / "tree"
    restic(target, "restore", "latest", "--target", str(tree))
    manifest: Manifest = json.loads((tree / MANIFEST_RELPATH).read_text())
    change(tree, manifest)
    (tree / MANIFEST_RELPATH).write_text(json.dumps(manifest))
    (latest,) = json.loads(restic(target, "snapshots", "--json", "latest"))
    tags = [arg for tag in latest["tags"] for arg in ("--tag", tag)]
    restic(target, "backup", "--host", LEGACY, *tags, ".", cwd=tree)
    (crafted,) = json.loads(restic(target, "snapshots", "--json", "latest"))
    return str(crafted["id"])


@contextlib.contextmanager
def replicating(
    target: BackupTarget, data_dir: Path, log: Path, *extra: str
) -> Iterator[subprocess.Popen[bytes]]:
    """``backup replicate`` (``extra``: more options) in its own process group: SIGKILL of the
    group is a pod kill."""
    with log.open("ab") as out:
        process = subprocess.Popen(
            [
                *(sys.executable, "-m", "hermes_runtime", "backup", "replicate"),
                *("--data-dir", str(data_dir), "--target", target.url),
                *("--rescan-seconds", "0.5", "--work-dir", str(log.parent / "replicate-work")),
                *extra,
            ],
            env={**os.environ, **target.env},
            stdout=out,
            stderr=out,
            start_new_session=True,
        )
    try:
        yield process
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()


def replica_keys(target: BackupTarget, relpath: str, agent: str = LEGACY) -> list[str]:
    """The LTX files of one agent's replica (file: ``<db>/ltx/<level>/``, S3: ``<db>/<level>/``)."""
    keys = target.object_keys(f"litestream/{agent}/{relpath}/")
    return [k for k in keys if k.endswith(".ltx")]
