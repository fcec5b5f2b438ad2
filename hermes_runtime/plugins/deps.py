"""Where a plugin's installed packages live, and whether the packages a tree asks for are there.

``D/.plugin-packages/<name>/<sha256 of requirements.txt>/`` holds one install (pip
``--target``), made by ``plugins install-deps`` in a temporary folder and renamed into place,
so a folder under its final name is always a whole install. The digest is of the file's bytes:
a new commit that leaves ``requirements.txt`` as it was uses the same folder (nothing is
installed again), and a folder outlives restarts on the data volume. ``state.json`` beside the
folders records the last install's outcome, so the linker can say why a plugin's packages are
missing. The linker (``layout.py``) and the gateway (``gateway_main``) read this; only the
installer (``install.py``) writes it.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from hermes_runtime.common.atomic import atomic_write_text

PACKAGES_DIR_NAME = ".plugin-packages"
REQUIREMENTS_NAME = "requirements.txt"
STATE_NAME = "state.json"
# A requirements file of a few hundred pinned packages is tens of KiB; anything far beyond
# is not a requirements file, and is refused before it is read into memory whole.
MAX_BYTES = 1024 * 1024
INSTALLED = "installed"
FAILED = "failed"
# What the linker names as the way out when packages are missing (docs/plugins.md).
INSTALL_VERB = "hermes-runtime plugins install-deps"


class PackagesProblem(Exception):
    """Why a plugin's packages are not usable; ``transient`` when an install may still come."""

    def __init__(self, message: str, transient: bool = False) -> None:
        super().__init__(message)
        self.transient = transient


@dataclass(frozen=True)
class InstallState:
    """The last install's outcome for one plugin (``state.json``)."""

    requirements_sha256: str
    status: str  # INSTALLED or FAILED
    package: str | None = None
    error: str | None = None
    # The target installed before this one: kept while the link may still use it.
    previous_sha256: str | None = None


def packages_root(data_dir: Path) -> Path:
    return data_dir / PACKAGES_DIR_NAME


def plugin_packages_dir(data_dir: Path, name: str) -> Path:
    return packages_root(data_dir) / name


def target_dir(data_dir: Path, name: str, digest: str) -> Path:
    return plugin_packages_dir(data_dir, name) / digest


def read_requirements(plugin_dir: Path) -> bytes | None:
    """The bytes of ``plugin_dir/requirements.txt``, ``None`` when there is none.

    It must be a regular file (a link is refused: the file is read as the plugin's own text,
    never through a link to something else) of at most ``MAX_BYTES``.
    """
    path = plugin_dir / REQUIREMENTS_NAME
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise PackagesProblem(f"{path}: cannot open (it must be a regular file): {exc}") from exc
    with os.fdopen(fd, "rb") as handle:
        info = os.fstat(handle.fileno())
        if not stat.S_ISREG(info.st_mode):
            raise PackagesProblem(f"{path} is not a regular file")
        data = handle.read(MAX_BYTES + 1)
    if len(data) > MAX_BYTES:
        raise PackagesProblem(f"{path} is over {MAX_BYTES} bytes: not a requirements file")
    return data


def digest_of(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def read_state(data_dir: Path, name: str) -> InstallState | None:
    """The recorded outcome, ``None`` when there is none or it does not parse (never fatal)."""
    try:
        raw: Any = json.loads((plugin_packages_dir(data_dir, name) / STATE_NAME).read_text())
        return InstallState(**raw)
    except (OSError, ValueError, TypeError):
        return None


def write_state(data_dir: Path, name: str, state: InstallState) -> None:
    path = plugin_packages_dir(data_dir, name) / STATE_NAME
    atomic_write_text(path, json.dumps(asdict(state), sort_keys=True) + "\n")


def state_stamp(data_dir: Path, name: str) -> tuple[int, int] | None:
    """(mtime, size) of ``state.json``: the watcher relinks when an install finishes."""
    try:
        info = os.stat(plugin_packages_dir(data_dir, name) / STATE_NAME)
    except OSError:
        return None
    return (info.st_mtime_ns, info.st_size)


def check_packages(data_dir: Path, name: str, plugin_dir: Path) -> Path | None:
    """The installed target for the tree at ``plugin_dir``, ``None`` when it needs none.

    Raises ``PackagesProblem``: the recorded failure when the last install of exactly these
    requirements failed (the plugin is not linked, and the message says which package and
    why), a transient problem when they are not installed yet.
    """
    data = read_requirements(plugin_dir)
    if data is None:
        return None
    digest = digest_of(data)
    target = target_dir(data_dir, name, digest)
    if target.is_dir():
        return target
    state = read_state(data_dir, name)
    if state is not None and state.requirements_sha256 == digest and state.status == FAILED:
        raise PackagesProblem(f"packages not installed: {state.error}")
    raise PackagesProblem(
        f"the packages of {REQUIREMENTS_NAME} (sha256 {digest[:12]}) are not installed yet "
        f"({INSTALL_VERB} installs them)",
        transient=True,
    )


def linked_targets(data_dir: Path, links: list[tuple[str, Path]]) -> list[Path]:
    """The installed target of each linked plugin that declares packages, in ``links``' order.

    ``links`` is (name, the link in ``D/plugins``); a plugin whose packages are missing or
    unreadable contributes nothing (it then fails at import, and Hermes says so).
    """
    targets: list[Path] = []
    for name, link in links:
        try:
            target = check_packages(data_dir, name, link)
        except PackagesProblem:
            continue
        if target is not None:
            targets.append(target)
    return targets
