"""Wheels built here and a real package index (pypiserver) serving them, for install-deps tests.

A wheel is a zip archive with a ``.dist-info`` folder (PEP 427): written here with ``zipfile``
from a generated source tree, so each test decides its tags (``py3-none-any``, or
``py3-none-win_amd64`` for a wheel of another platform) and its dependencies, and nothing is
fetched from outside to build it.
"""

from __future__ import annotations

import base64
import hashlib
import subprocess
import sys
import time
import urllib.request
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from support.net import free_port

PYPI_SERVER = Path(sys.executable).with_name("pypi-server")


def build_wheel(
    out_dir: Path,
    name: str,
    version: str,
    files: dict[str, str],
    tag: str = "py3-none-any",
    requires: tuple[str, ...] = (),
) -> Path:
    """A wheel of ``files`` (path in the archive -> text); its filename carries ``tag``."""
    dist = name.replace("-", "_")
    info = f"{dist}-{version}.dist-info"
    metadata = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
    metadata += "".join(f"Requires-Dist: {requirement}\n" for requirement in requires)
    wheel_meta = f"Wheel-Version: 1.0\nGenerator: tests\nRoot-Is-Purelib: true\nTag: {tag}\n"
    contents = {**files, f"{info}/METADATA": metadata, f"{info}/WHEEL": wheel_meta}
    record = "".join(
        f"{path},{_record_hash(text)},{len(text.encode())}\n" for path, text in contents.items()
    )
    record += f"{info}/RECORD,,\n"
    path = out_dir / f"{dist}-{version}-{tag}.whl"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        for member, text in {**contents, f"{info}/RECORD": record}.items():
            archive.writestr(member, text)
    return path


def _record_hash(text: str) -> str:
    digest = hashlib.sha256(text.encode()).digest()
    return "sha256=" + base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


def file_hash(path: Path) -> str:
    """``sha256:<hex>`` of a file, as a requirements file's ``--hash`` names it."""
    return "sha256:" + hashlib.sha256(path.read_bytes()).hexdigest()


def module_wheel(out_dir: Path, name: str, version: str, tag: str = "py3-none-any") -> Path:
    """A wheel whose module ``name`` says its version (``VALUE``)."""
    module = name.replace("-", "_")
    text = f"VALUE = '{name} {version}'\n"
    return build_wheel(out_dir, name, version, {f"{module}/__init__.py": text}, tag)


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
