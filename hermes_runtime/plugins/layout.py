"""Where things live under the data dir, who owns an entry, and whether a target is safe.

git-sync for plugin ``<name>`` runs with ``--root D/.git-sync/<name> --link
current``: the synced tree is ``D/.git-sync/<name>/current``, a symlink that
git-sync swaps atomically to ``.worktrees/<sha>``. Hermes scans ``D/plugins``
only, so the hidden clone (with its ``.git`` and ``.worktrees``) is never seen
twice. ``D/plugins/<name>`` is a relative link to the worktree that passed the
checks (``../.git-sync/<name>/.worktrees/<sha>``), never through ``current``:
git-sync moves ``current`` before anything has checked the new commit, and a
gateway starting in between would load it.
"""

from __future__ import annotations

import os
import posixpath
import time
from dataclasses import dataclass
from pathlib import Path

from ruamel.yaml import YAML
from ruamel.yaml.error import YAMLError

from hermes_runtime.plugins.deps import PackagesProblem, check_packages

SYNC_DIR_NAME = ".git-sync"
PLUGINS_DIR_NAME = "plugins"
CURRENT_LINK_NAME = "current"
OWNED_PREFIX = f"../{SYNC_DIR_NAME}/"
STATE_DIR_NAME = ".hermes-runtime"
MANIFEST_NAMES = ("plugin.yaml", "plugin.yml")
MAX_SWAP_RETRIES = 5
MIB = 1024 * 1024


class PluginProblem(Exception):
    """Why one plugin cannot be linked; ``transient`` problems may clear with ``--wait``."""

    def __init__(self, message: str, transient: bool = False) -> None:
        super().__init__(message)
        self.transient = transient


@dataclass(frozen=True)
class Layout:
    """Paths under one data dir."""

    data_dir: Path

    @property
    def plugins_dir(self) -> Path:
        return self.data_dir / PLUGINS_DIR_NAME

    @property
    def sync_dir(self) -> Path:
        return self.data_dir / SYNC_DIR_NAME

    @property
    def state_dir(self) -> Path:
        """Our scratch space: temporary links are built here, never inside ``plugins/``,
        because Hermes does not skip dot-entries and would load a temp link twice."""
        return self.data_dir / STATE_DIR_NAME

    def sync_root(self, name: str) -> Path:
        return self.sync_dir / name

    def current(self, name: str) -> Path:
        return self.sync_root(name) / CURRENT_LINK_NAME

    def link_path(self, name: str) -> Path:
        return self.plugins_dir / name

    @staticmethod
    def link_target(name: str, worktree: str, sub_path: str) -> str:
        """The relative text of ``D/plugins/<name>``: the checked worktree itself.

        ``worktree`` is its path inside ``D/.git-sync/<name>`` (``.worktrees/<sha>``).
        """
        base = f"{OWNED_PREFIX}{name}/{worktree}"
        return f"{base}/{sub_path}" if sub_path else base


def owned_link_target(entry: Path) -> str | None:
    """Return the link text if ``entry`` is a link we made, else ``None`` (it is the user's)."""
    try:
        if not entry.is_symlink():
            return None
        target = os.readlink(entry)
    except OSError:
        return None
    normalized = posixpath.normpath(target)
    if not target.startswith(OWNED_PREFIX) or not normalized.startswith(OWNED_PREFIX):
        return None
    return target


@dataclass(frozen=True)
class TargetCheck:
    """What a successful check saw: the worktree behind ``current`` at that moment.

    ``relative`` is the worktree's path inside ``D/.git-sync/<name>``, what the link
    names; ``size_bytes`` the bytes of files in it; ``packages`` the installed target of its
    ``requirements.txt`` (``None``: it declares no packages).
    """

    commit: str
    worktree: Path
    relative: str
    size_bytes: int
    packages: Path | None = None


def check_target(layout: Layout, name: str, sub_path: str, max_bytes: int) -> TargetCheck:
    """Validate the worktree ``current`` resolves to, retrying if git-sync swaps it meanwhile.

    ``current`` is resolved once and that worktree is checked; the link then names
    the worktree, not ``current``. git-sync worktrees are immutable once published,
    so what was checked is what is linked. If ``current`` moves while we look (git-sync
    deletes the previous worktree right after a swap, so one being checked may vanish
    under us, leaving a misleading error), look again.
    """
    last_problem: PluginProblem | None = None
    for _ in range(MAX_SWAP_RETRIES):
        before = _read_current(layout, name)
        try:
            check = _check_worktree(layout, name, sub_path, max_bytes)
        except FileNotFoundError as exc:
            last_problem = PluginProblem(f"{exc.filename or exc}: vanished while checking", True)
            continue
        if _read_current(layout, name) == before:
            return check
        last_problem = PluginProblem(f"{layout.current(name)} kept changing while checking", True)
    assert last_problem is not None
    raise last_problem


def wait_for_target(
    layout: Layout, name: str, sub_path: str, max_bytes: int, deadline: float
) -> TargetCheck:
    """Check the target, polling until ``deadline`` while the problem is transient."""
    while True:
        try:
            return check_target(layout, name, sub_path, max_bytes)
        except PluginProblem as problem:
            if not problem.transient or time.monotonic() >= deadline:
                raise
        time.sleep(min(0.2, max(0.0, deadline - time.monotonic())))


def _read_current(layout: Layout, name: str) -> str | None:
    try:
        return os.readlink(layout.current(name))
    except OSError:
        return None


def _check_worktree(layout: Layout, name: str, sub_path: str, max_bytes: int) -> TargetCheck:
    root = layout.sync_root(name)
    if root.is_symlink():
        raise PluginProblem(f"{root} is a symlink; git-sync's root must be a real directory")
    current = layout.current(name)
    if not os.path.lexists(current):
        raise PluginProblem(f"{current} does not exist (git-sync has not synced yet)", True)
    if not current.is_symlink():
        raise PluginProblem(f"{current} is not a symlink (git-sync publishes each commit as one)")
    real_root = Path(os.path.realpath(root))
    worktree = Path(os.path.realpath(current))
    if not _is_within(worktree, real_root) or worktree == real_root:
        raise PluginProblem(f"{current} resolves to {worktree}, outside {root}")
    if not worktree.is_dir():
        raise PluginProblem(f"{current} is dangling (points to a missing worktree)", True)
    size = _check_size(worktree, current, max_bytes)
    plugin_dir = Path(os.path.realpath(worktree / sub_path)) if sub_path else worktree
    if not _is_within(plugin_dir, worktree):
        raise PluginProblem(
            f"subPath {sub_path!r} resolves to {plugin_dir}, outside the repository"
        )
    if not plugin_dir.is_dir():
        raise PluginProblem(f"subPath {sub_path!r} is not a directory in {current}")
    _check_manifest(plugin_dir, current, sub_path)
    _check_no_escaping_links(plugin_dir, worktree)
    packages = _check_packages(layout, name, plugin_dir)
    relative = worktree.relative_to(real_root).as_posix()
    return TargetCheck(worktree.name, worktree, relative, size, packages)


def _check_packages(layout: Layout, name: str, plugin_dir: Path) -> Path | None:
    """A tree whose declared packages did not install is not linked: it would fail at import,
    and the reason (which package, why) is told here, where the operator looks."""
    try:
        return check_packages(layout.data_dir, name, plugin_dir)
    except PackagesProblem as problem:
        raise PluginProblem(str(problem), problem.transient) from None


def _check_size(worktree: Path, current: Path, max_bytes: int) -> int:
    """Refuse a worktree whose files hold more than ``max_bytes``; return the bytes held."""
    try:
        size = tree_bytes(worktree)
    except FileNotFoundError:
        raise  # deleted under us: check_target looks again
    except OSError as exc:
        raise PluginProblem(f"{current}: cannot measure the worktree: {exc}") from exc
    if size > max_bytes:
        raise PluginProblem(
            f"{current} -> {worktree.name} holds {size / MIB:.1f} MiB of files "
            f"({size} bytes), over the plugin's size cap of {max_bytes / MIB:g} MiB "
            "(maxSizeMiB)"
        )
    return size


def tree_bytes(root: Path) -> int:
    """Bytes of the regular files under ``root``, symlinks never followed.

    A link is not a file of the tree: following one would count a file twice, or
    count what lies outside the repository (refused anyway, by the link check).
    """
    total = 0
    pending = [root]
    while pending:
        with os.scandir(pending.pop()) as entries:
            for entry in entries:
                if entry.is_dir(follow_symlinks=False):
                    pending.append(Path(entry.path))
                elif entry.is_file(follow_symlinks=False):
                    total += entry.stat(follow_symlinks=False).st_size
    return total


def _check_manifest(plugin_dir: Path, current: Path, sub_path: str) -> None:
    shown = f"{current}/{sub_path}" if sub_path else str(current)
    manifest = next((plugin_dir / n for n in MANIFEST_NAMES if (plugin_dir / n).exists()), None)
    if manifest is None:
        raise PluginProblem(f"{shown} has no plugin.yaml (Hermes' plugin manifest)")
    if not manifest.is_file():
        raise PluginProblem(f"{shown}/{manifest.name} is not a regular file")
    try:
        data = YAML(typ="safe").load(manifest.read_text(encoding="utf-8"))
    except (YAMLError, UnicodeDecodeError) as exc:
        raise PluginProblem(f"{shown}/{manifest.name} is not valid YAML: {exc}") from exc
    if data is not None and not isinstance(data, dict):
        raise PluginProblem(f"{shown}/{manifest.name} must be a YAML mapping")
    if not (plugin_dir / "__init__.py").is_file():
        raise PluginProblem(f"{shown} has no __init__.py with register(ctx)")


def _check_no_escaping_links(plugin_dir: Path, worktree: Path) -> None:
    """Reject any symlink inside the plugin tree that resolves outside the repository."""
    for dirpath, dirnames, filenames in os.walk(plugin_dir, followlinks=False):
        dirnames[:] = [d for d in dirnames if d != ".git"]
        for entry_name in (*dirnames, *filenames):
            entry = Path(dirpath) / entry_name
            if not entry.is_symlink():
                continue
            resolved = Path(os.path.realpath(entry))
            if not _is_within(resolved, worktree):
                shown = entry.relative_to(worktree)
                raise PluginProblem(f"symlink {shown} in the repository resolves outside it")


def _is_within(path: Path, parent: Path) -> bool:
    return path == parent or parent in path.parents
