"""Converge ``D/plugins`` and ``plugins.enabled`` onto the spec.

Rules: each plugin is a relative link to the git-sync worktree
that passed the checks (``../.git-sync/<name>/.worktrees/<sha>``), never through
``current``, swapped in atomically; a bad plugin fails alone, and a refused commit
loses its link (a gateway start then runs without the plugin); entries we did not
make are never touched; our links whose plugin left the spec are removed; running
twice changes nothing. Nothing is ever written inside ``D/.git-sync`` (the agent
may mount it read-only).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import secrets
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from hermes_runtime.common.atomic import fsync_dir
from hermes_runtime.common.errors import RuntimeFailure
from hermes_runtime.plugins.config import apply_enabled, load_config
from hermes_runtime.plugins.layout import (
    Layout,
    PluginProblem,
    TargetCheck,
    owned_link_target,
    wait_for_target,
)
from hermes_runtime.plugins.spec import SpecEntry, load_spec

LINKED = "linked"
UNCHANGED = "unchanged"
REMOVED = "removed"
FAILED = "failed"


@dataclass
class PluginResult:
    """The outcome for one plugin name; ``commit`` is the checked worktree the link names."""

    name: str
    status: str
    link: str | None = None
    commit: str | None = None
    enabled: bool = False
    error: str | None = None
    packages: str | None = None  # the installed target on the gateway's sys.path, if any


@dataclass
class LinkReport:
    """What one convergence did. ``ok`` is false if any plugin failed."""

    data_dir: Path
    spec_path: Path
    results: list[PluginResult] = field(default_factory=list)
    config_changed: bool = False

    @property
    def ok(self) -> bool:
        return all(result.status != FAILED for result in self.results)

    @property
    def changed(self) -> bool:
        """Whether links or ``plugins.enabled`` changed on disk in this run."""
        return self.config_changed or any(r.status in (LINKED, REMOVED) for r in self.results)

    @property
    def failures(self) -> list[PluginResult]:
        return [r for r in self.results if r.status == FAILED]

    def commits(self) -> dict[str, str | None]:
        """Plugin name to the commit it runs; a change here means Hermes must reload."""
        return {r.name: r.commit for r in self.results if r.status in (LINKED, UNCHANGED)}

    def to_dict(self) -> dict[str, Any]:
        return {
            "data_dir": str(self.data_dir),
            "spec": str(self.spec_path),
            "ok": self.ok,
            "changed": self.changed,
            "config_changed": self.config_changed,
            "plugins": [asdict(r) for r in self.results],
        }


def link_plugins(data_dir: Path, spec_path: Path, wait_seconds: float = 0) -> LinkReport:
    """Converge ``data_dir/plugins`` onto the spec; raise ``RuntimeFailure`` on a bad spec.

    A spec or config.yaml that does not parse raises before anything changes;
    per-plugin problems are reported in the returned ``LinkReport``.
    """
    layout = Layout(Path(data_dir))
    entries = load_spec(Path(spec_path))
    config_path = layout.data_dir / "config.yaml"
    if not layout.data_dir.is_dir():
        raise RuntimeFailure(f"data dir {layout.data_dir} does not exist")
    config_document = load_config(config_path)
    layout.plugins_dir.mkdir(parents=True, exist_ok=True)
    with _exclusive_lock(layout):
        return _converge(
            layout, Path(spec_path), entries, config_path, config_document, wait_seconds
        )


def _converge(
    layout: Layout,
    spec_path: Path,
    entries: list[SpecEntry],
    config_path: Path,
    config_document: Any,
    wait_seconds: float,
) -> LinkReport:
    report = LinkReport(layout.data_dir, spec_path)
    _clear_staging(layout)
    owned_before = _owned_links(layout)
    deadline = time.monotonic() + max(0.0, wait_seconds)
    for entry in entries:
        result = _link_one(layout, entry, deadline)
        report.results.append(result)
    spec_names = {e.name for e in entries if e.valid_name}
    for name in sorted(set(owned_before) - spec_names):
        result = _remove_link(layout, name)
        report.results.append(result)
    managed = spec_names | set(owned_before)
    desired = _desired_enabled(report, managed)
    report.config_changed = apply_enabled(config_path, config_document, managed, desired)
    return report


def _link_one(layout: Layout, entry: SpecEntry, deadline: float) -> PluginResult:
    if entry.error is not None:
        return PluginResult(entry.name, FAILED, error=entry.error)
    link = layout.link_path(entry.name)
    if os.path.lexists(link) and owned_link_target(link) is None:
        return PluginResult(
            entry.name,
            FAILED,
            error=f"{link} exists and is not a link into ../.git-sync/: it belongs to the user",
        )
    try:
        check: TargetCheck = wait_for_target(
            layout, entry.name, entry.sub_path, entry.max_bytes, deadline
        )
    except PluginProblem as problem:
        return PluginResult(entry.name, FAILED, error=_refuse(layout, link, problem))
    target = Layout.link_target(entry.name, check.relative, entry.sub_path)
    status = UNCHANGED if owned_link_target(link) == target else LINKED
    if status == LINKED:
        _atomic_symlink(layout, target, link)
    packages = str(check.packages) if check.packages is not None else None
    return PluginResult(entry.name, status, target, check.commit, entry.enabled, packages=packages)


def _refuse(layout: Layout, link: Path, problem: PluginProblem) -> str:
    """Why the plugin failed; a refused tree also loses its link.

    The link names the last commit that passed, but git-sync deletes that worktree right
    after it swaps ``current`` to the refused one: the link would dangle, and with a
    longer ``--stale-worktree-timeout`` it would run old code until the worktree goes. So
    the plugin is unlinked: the next gateway start (any plugin's change, a rotated secret,
    a crash) runs without it. The running gateway keeps the last good code in memory until
    then; a later good commit links the plugin again. A transient problem (no ``current``
    yet) keeps the link.
    """
    if problem.transient or owned_link_target(link) is None:
        return str(problem)
    try:
        link.unlink()
    except FileNotFoundError:
        pass
    except OSError as exc:
        return f"{problem}; and its link {link} could not be removed: {exc}"
    fsync_dir(layout.plugins_dir)
    return f"{problem}; {link} removed, so no gateway start loads this commit"


def _remove_link(layout: Layout, name: str) -> PluginResult:
    link = layout.link_path(name)
    try:
        link.unlink()
    except FileNotFoundError:
        pass
    except OSError as exc:
        return PluginResult(name, FAILED, error=f"cannot remove stale link {link}: {exc}")
    fsync_dir(layout.plugins_dir)
    return PluginResult(name, REMOVED)


def _desired_enabled(report: LinkReport, managed: set[str]) -> dict[str, bool]:
    """Linked plugins follow the spec, removed ones leave, failed ones keep their state."""
    desired: dict[str, bool] = {}
    for result in report.results:
        if result.name not in managed:
            continue
        if result.status in (LINKED, UNCHANGED):
            desired[result.name] = result.enabled
        elif result.status == REMOVED:
            desired[result.name] = False
    return desired


def _owned_links(layout: Layout) -> dict[str, str]:
    owned: dict[str, str] = {}
    if not layout.plugins_dir.is_dir():
        return owned
    for entry in layout.plugins_dir.iterdir():
        target = owned_link_target(entry)
        if target is not None:
            owned[entry.name] = target
    return owned


def _clear_staging(layout: Layout) -> None:
    """Temporary links left by a run that crashed before its rename (we hold the lock)."""
    staging = layout.state_dir / "staging"
    if staging.is_dir():
        for leftover in staging.iterdir():
            with contextlib.suppress(FileNotFoundError):
                leftover.unlink()


def _atomic_symlink(layout: Layout, target: str, link: Path) -> None:
    """Build the link in our state dir and rename it over ``link``.

    The temporary link never sits in ``plugins/`` (Hermes would discover it);
    a relative link's text is resolved from where it ends up, so building it
    elsewhere on the same filesystem and renaming is exact and atomic.
    """
    staging = layout.state_dir / "staging"
    staging.mkdir(parents=True, exist_ok=True)
    temp = staging / f"{link.name}.{secrets.token_hex(4)}"
    os.symlink(target, temp)
    try:
        os.replace(temp, link)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            temp.unlink()
        raise
    fsync_dir(link.parent)


@contextlib.contextmanager
def _exclusive_lock(layout: Layout) -> Iterator[None]:
    """One convergence at a time per data dir (the watch loop and a manual run may overlap)."""
    layout.state_dir.mkdir(parents=True, exist_ok=True)
    lock_path = layout.state_dir / "plugins.lock"
    fd = os.open(lock_path, os.O_CREAT | os.O_RDWR, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)
