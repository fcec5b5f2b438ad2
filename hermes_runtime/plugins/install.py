"""``plugins install-deps``: install each plugin's declared packages where the gateway finds them.

For every plugin of the spec, the tree git-sync's ``current`` names is read (only read: the
trees are mounted read-only to every container but git-sync's). Its ``requirements.txt`` is
checked (``requirements.py``), then installed by pip (``piprun.py``) into a temporary folder
beside its target ``D/.plugin-packages/<name>/<sha256>`` and renamed into place, so a target is
whole or absent. A target that exists is not installed again; the state file records each
outcome (``deps.py``). Targets no longer wanted are pruned: all but the new one and the one the
plugin's current link uses (a running gateway may still import from it). A plugin that left
the spec loses its folder once it is no longer linked. One run at a time per data dir.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import secrets
import shutil
import tempfile
import threading
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from hermes_runtime.common.atomic import fsync_dir
from hermes_runtime.common.errors import RuntimeFailure
from hermes_runtime.common.logs import log_event
from hermes_runtime.plugins.deps import (
    FAILED,
    INSTALLED,
    REQUIREMENTS_NAME,
    STATE_NAME,
    InstallState,
    PackagesProblem,
    digest_of,
    packages_root,
    plugin_packages_dir,
    read_requirements,
    read_state,
    target_dir,
    write_state,
)
from hermes_runtime.plugins.indexsource import IndexSource
from hermes_runtime.plugins.layout import Layout, owned_link_target
from hermes_runtime.plugins.piprun import run_pip
from hermes_runtime.plugins.requirements import (
    PinnedRequirement,
    RequirementsProblem,
    parse_requirements,
    render,
)
from hermes_runtime.plugins.spec import SpecEntry, load_spec

NONE = "none"  # the plugin declares no packages
UNCHANGED = "unchanged"
WAITING = "waiting"  # git-sync has not synced it yet
TEMP_PREFIX = ".tmp-"
LOCK_NAME = ".install.lock"

MIB = 1 << 20
Step = Callable[[str, dict[str, Any]], None]


@dataclass
class InstallResult:
    """One plugin's outcome: ``installed``, ``unchanged``, ``none``, ``waiting`` or ``failed``."""

    name: str
    status: str
    requirements_sha256: str | None = None
    target: str | None = None
    package: str | None = None
    error: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Installer:
    """What one run needs: where, from which index (None: none set, which fails only a
    plugin that declares packages), with which Python, telling whom, and how many bytes one
    plugin's installed packages may take (None: no cap)."""

    data_dir: Path
    index: IndexSource | None
    python: str
    step: Step
    max_bytes: int | None = None


def install_all(installer: Installer, spec_path: Path) -> list[InstallResult]:
    """Install the packages of every plugin in the spec; raise ``RuntimeFailure`` on a bad spec."""
    entries = load_spec(Path(spec_path))
    root = packages_root(installer.data_dir)
    root.mkdir(parents=True, exist_ok=True)
    with _exclusive_lock(root):
        results = [_install_one(installer, entry) for entry in entries if entry.error is None]
        _prune_left(installer.data_dir, {entry.name for entry in entries if entry.valid_name})
    return results


def watch_install(
    installer: Installer,
    spec_path: Path,
    stop: threading.Event,
    interval: float,
    on_results: Callable[[list[InstallResult]], None],
) -> list[InstallResult]:
    """Run ``install_all`` every ``interval`` seconds until ``stop``; ``on_results`` hears the
    first run's results and later only those that changed. A spec that does not parse is
    logged and tried again: the sidecar must outlive one bad ConfigMap."""
    last: dict[str, tuple[str, str | None]] = {}

    def seen(result: InstallResult) -> tuple[str, str | None]:
        status = INSTALLED if result.status == UNCHANGED else result.status  # same target
        return (status, result.requirements_sha256)

    results: list[InstallResult] = []
    while True:
        try:
            results = install_all(installer, spec_path)
        except RuntimeFailure as exc:
            log_event("plugins.install_deps.error", error=str(exc))
        else:
            changed = [r for r in results if last.get(r.name) != seen(r)]
            last = {r.name: seen(r) for r in results}
            if changed:
                on_results(changed)
        if stop.wait(interval):
            return results


def _install_one(installer: Installer, entry: SpecEntry) -> InstallResult:
    layout = Layout(installer.data_dir)
    plugin_dir = _plugin_dir(layout, entry)
    if plugin_dir is None:
        return InstallResult(entry.name, WAITING, error=f"{layout.current(entry.name)} not synced")
    try:
        data = read_requirements(plugin_dir)
    except PackagesProblem as problem:
        return _failed(installer, entry.name, "", None, str(problem))
    if data is None:
        _prune(installer.data_dir, entry.name, keep={_in_use(layout, entry.name)})
        return InstallResult(entry.name, NONE)
    digest = digest_of(data)
    target = target_dir(installer.data_dir, entry.name, digest)
    if target.is_dir():
        result = InstallResult(entry.name, UNCHANGED, digest, str(target))
    else:
        result = _install(installer, entry.name, plugin_dir, data, digest)
    if result.status != FAILED:
        _record_installed(installer.data_dir, entry.name, digest)
    _prune(installer.data_dir, entry.name, keep={digest, _in_use(layout, entry.name)})
    return result


def _record_installed(data_dir: Path, name: str, digest: str) -> None:
    """``state.json`` says ``digest`` is installed, and which target came before it."""
    state = read_state(data_dir, name)
    if state is not None and state.status == INSTALLED and state.requirements_sha256 == digest:
        return
    previous = read_state_installed(state)
    write_state(data_dir, name, InstallState(digest, INSTALLED, previous_sha256=previous))


def read_state_installed(state: InstallState | None) -> str | None:
    """The target a state says is in place (the last installed, even after a failure)."""
    if state is None:
        return None
    return state.requirements_sha256 if state.status == INSTALLED else state.previous_sha256


def _in_use(layout: Layout, name: str) -> str | None:
    """The target the plugin's link uses now: read from the linked tree, or, when git-sync has
    deleted that tree already (the link dangles until relinked), the one installed before the
    latest: a running gateway may still import from it."""
    linked = _linked_digest(layout, name)
    if linked is not None:
        return linked
    state = read_state(layout.data_dir, name)
    return state.previous_sha256 if state is not None else None


def _install(
    installer: Installer, name: str, plugin_dir: Path, data: bytes, digest: str
) -> InstallResult:
    source = f"{plugin_dir / REQUIREMENTS_NAME}"
    try:
        requirements = parse_requirements(data.decode("utf-8"), source)
    except UnicodeDecodeError as exc:
        return _failed(installer, name, digest, None, f"{source} is not UTF-8 text: {exc}")
    except RequirementsProblem as problem:
        return _failed(installer, name, digest, problem.package, str(problem))
    if installer.index is None:
        return _failed(
            installer,
            name,
            digest,
            None,
            "no package index is set (HERMES_RUNTIME_PLUGIN_INDEX_URL or --index-url)",
        )
    installer.step("installing", {"plugin": name, "packages": len(requirements)})
    return _pip_into_place(installer, installer.index, name, digest, requirements)


def _pip_into_place(
    installer: Installer,
    index: IndexSource,
    name: str,
    digest: str,
    requirements: list[PinnedRequirement],
) -> InstallResult:
    folder = plugin_packages_dir(installer.data_dir, name)
    folder.mkdir(parents=True, exist_ok=True)
    temp = folder / f"{TEMP_PREFIX}{digest[:12]}-{secrets.token_hex(4)}"
    temp.mkdir()  # a file of comments only declares nothing: its target is an empty folder
    try:
        with tempfile.NamedTemporaryFile("w", suffix=".txt", dir=folder, prefix=TEMP_PREFIX) as f:
            f.write(render(requirements))
            f.flush()
            failure = run_pip(installer.python, index, temp, Path(f.name), requirements)
        if failure is not None:
            return _failed(installer, name, digest, failure.package, failure.reason)
        oversize = _over_cap(temp, installer.max_bytes)
        if oversize is not None:
            return _failed(installer, name, digest, None, oversize)
        target = target_dir(installer.data_dir, name, digest)
        os.rename(temp, target)
        fsync_dir(folder)
    finally:
        shutil.rmtree(temp, ignore_errors=True)
    installer.step("installed", {"plugin": name, "requirements_sha256": digest})
    return InstallResult(name, INSTALLED, digest, str(target))


def _over_cap(folder: Path, max_bytes: int | None) -> str | None:
    """Why the packages installed in ``folder`` are refused for their size, or None.

    The requirements are untrusted: a plugin's commit can pin a wheel of gigabytes, and its
    packages sit on the agent's data volume. The files are counted as stored (blocks), no
    link followed; what pip downloads on the way goes to the sidecar's own size-limited /tmp.
    """
    if max_bytes is None:
        return None
    used = tree_bytes(folder)
    if used <= max_bytes:
        return None
    return (
        f"the installed packages take {used / MIB:.1f} MiB, over the cap of "
        f"{max_bytes / MIB:.0f} MiB (--max-size-mib; the chart's pluginPackages.maxSizeMiB)"
    )


def tree_bytes(folder: Path) -> int:
    """Bytes the files under ``folder`` occupy on disk; links are counted, never followed."""
    total = 0
    for root, dirs, files in os.walk(folder):
        for name in (*dirs, *files):
            total += os.lstat(os.path.join(root, name)).st_blocks * 512
    return total


def _failed(
    installer: Installer, name: str, digest: str, package: str | None, reason: str
) -> InstallResult:
    """Record the failure for the linker and say it: plugin, package, why."""
    error = f"package {package}: {reason}" if package else reason
    if digest:
        previous = read_state_installed(read_state(installer.data_dir, name))
        write_state(
            installer.data_dir, name, InstallState(digest, FAILED, package, error, previous)
        )
    installer.step("failed", {"plugin": name, "package": package, "error": error})
    return InstallResult(name, FAILED, digest or None, package=package, error=error)


def _plugin_dir(layout: Layout, entry: SpecEntry) -> Path | None:
    """The plugin's folder in the worktree ``current`` names, if it stays inside the root.

    The linker checks the tree in full before linking it; here only the requirements file is
    read, and a tree that escapes its root is left to the linker to refuse.
    """
    root = Path(os.path.realpath(layout.sync_root(entry.name)))
    worktree = Path(os.path.realpath(layout.current(entry.name)))
    if root not in worktree.parents or not worktree.is_dir():
        return None
    plugin_dir = Path(os.path.realpath(worktree / entry.sub_path)) if entry.sub_path else worktree
    if plugin_dir != worktree and worktree not in plugin_dir.parents:
        return None
    return plugin_dir


def _linked_digest(layout: Layout, name: str) -> str | None:
    link = layout.link_path(name)
    if owned_link_target(link) is None:
        return None
    try:
        data = read_requirements(link)
    except PackagesProblem:
        return None
    return digest_of(data) if data is not None else None


def _prune(data_dir: Path, name: str, keep: set[str | None]) -> None:
    """Remove targets and leftovers of crashed runs but those in ``keep`` (we hold the lock)."""
    folder = plugin_packages_dir(data_dir, name)
    if not folder.is_dir():
        return
    for child in folder.iterdir():
        if child.name == STATE_NAME or child.name in keep:
            continue
        if child.is_dir() and not child.is_symlink():
            shutil.rmtree(child, ignore_errors=True)
        else:
            child.unlink(missing_ok=True)


def _prune_left(data_dir: Path, spec_names: set[str]) -> None:
    """A plugin that left the spec loses its packages once its link is gone too."""
    layout = Layout(data_dir)
    for folder in packages_root(data_dir).iterdir():
        if folder.name.startswith(".") or folder.name in spec_names:
            continue
        if owned_link_target(layout.link_path(folder.name)) is None and folder.is_dir():
            shutil.rmtree(folder, ignore_errors=True)


@contextlib.contextmanager
def _exclusive_lock(root: Path) -> Iterator[None]:
    fd = os.open(root / LOCK_NAME, os.O_CREAT | os.O_RDWR, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)
