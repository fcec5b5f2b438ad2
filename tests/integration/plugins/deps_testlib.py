"""A real package index (pypiserver) serving the wheels the install-deps tests build
(``support.wheels``)."""

from __future__ import annotations

import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from support.net import free_port

PYPI_SERVER = Path(sys.executable).with_name("pypi-server")


@dataclass(frozen=True)
class PackageIndex:
    url: str  # the simple index: <url>/<project>/
    root: Path


@contextmanager
def serve_index(root: Path, log: Path) -> Iterator[PackageIndex]:
    """pypiserver serving ``root`` on loopback, no fallback to another index, no auth."""
    port = free_port()
    command = [
        str(PYPI_SERVER),
        "run",
        "-p",
        str(port),
        "-i",
        "127.0.0.1",
        "--disable-fallback",
        "-a",
        ".",
        "-P",
        ".",
        "--backend",
        "simple-dir",
        str(root),
    ]
    with log.open("wb") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT)
    try:
        url = f"http://127.0.0.1:{port}/simple"
        _wait_ready(url, process, log)
        yield PackageIndex(url, root)
    finally:
        process.terminate()
        process.wait(timeout=10)


def _wait_ready(url: str, process: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise AssertionError(f"pypi-server exited: {log.read_text()}")
        try:
            with urllib.request.urlopen(f"{url}/", timeout=2):
                return
        except OSError:
            time.sleep(0.1)
    raise AssertionError(f"pypi-server did not answer at {url}: {log.read_text()}")
