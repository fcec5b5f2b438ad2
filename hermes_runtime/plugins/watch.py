"""Re-converge when the spec, a plugin's ``current`` link or its packages' install state changes.

Polling, not inotify: the spec is a ConfigMap file that the kubelet replaces
by swapping a ``..data`` symlink, and ``current`` is swapped by rename; both
are cheap to stat, and a one-second poll costs nothing next to a gateway
restart. The callback runs only when what Hermes would load differs from the
last convergence (a link, a commit, or ``plugins.enabled``), so a steady
state never restarts anything.
"""

from __future__ import annotations

import hashlib
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from hermes_runtime.common.errors import RuntimeFailure
from hermes_runtime.common.logs import log_event
from hermes_runtime.plugins.deps import state_stamp
from hermes_runtime.plugins.layout import Layout
from hermes_runtime.plugins.link import REMOVED, LinkReport, link_plugins
from hermes_runtime.plugins.spec import load_spec

DEFAULT_INTERVAL = 1.0
RETRY_SECONDS = 30.0


@dataclass(frozen=True)
class Snapshot:
    """What the watcher compares between polls: the spec bytes, each ``current``, and each
    plugin's ``state.json`` stamp (an install that finished lets a waiting plugin link)."""

    spec_digest: str
    currents: tuple[tuple[str, str | None, tuple[int, int] | None], ...]


def take_snapshot(data_dir: Path, spec_path: Path) -> Snapshot:
    layout = Layout(Path(data_dir))
    try:
        raw = Path(spec_path).read_bytes()
    except OSError as exc:
        raw = f"unreadable: {exc.__class__.__name__}".encode()
    names = _spec_names(spec_path)
    currents = tuple(
        (name, _readlink(layout.current(name)), state_stamp(layout.data_dir, name))
        for name in names
    )
    return Snapshot(hashlib.sha256(raw).hexdigest(), currents)


def loaded_state(
    report: LinkReport, previous: tuple[tuple[str, str | None, bool], ...] = ()
) -> tuple[tuple[str, str | None, bool], ...]:
    """What Hermes would load after ``report``: (name, commit, enabled) per plugin.

    A plugin that failed this round keeps its previous row: its new commit is
    broken, and the running gateway still holds the old code in memory, so a
    restart would only make things worse.
    """
    rows = {row[0]: row for row in previous}
    for result in report.results:
        if result.commit is not None:
            rows[result.name] = (result.name, result.commit, result.enabled)
        elif result.status == REMOVED:
            rows.pop(result.name, None)
    return tuple(sorted(rows.values(), key=lambda row: row[0]))


def watch_links(
    data_dir: Path,
    spec_path: Path,
    on_change: Callable[[LinkReport], None],
    stop: threading.Event,
    interval: float = DEFAULT_INTERVAL,
    baseline: LinkReport | None = None,
    wait_seconds: float = 0,
    on_report: Callable[[LinkReport], None] | None = None,
) -> None:
    """Poll until ``stop`` is set; call ``on_change(report)`` when the loaded set changes.

    ``on_report`` sees every convergence's report, a failed one too (which changes nothing
    loaded, so ``on_change`` never hears of it): the agent's metrics say a plugin is stale.

    ``baseline`` is the report of the entrypoint's own first ``link_plugins``
    (the gateway already runs that state); without one, the first convergence
    becomes the baseline and triggers nothing. A spec that stops parsing is
    logged and skipped: the last good links stay in place.
    """
    last_state = loaded_state(baseline) if baseline is not None else None
    last_snapshot: Snapshot | None = None
    retry_at: float | None = None
    while not stop.is_set():
        snapshot = take_snapshot(data_dir, spec_path)
        due = retry_at is not None and time.monotonic() >= retry_at
        if snapshot != last_snapshot or due:
            last_snapshot = snapshot
            report = _converge_once(data_dir, spec_path, wait_seconds)
            if report is not None and on_report is not None:
                on_report(report)
            retry_at = (
                None if report is not None and report.ok else time.monotonic() + RETRY_SECONDS
            )
            if report is not None:
                state = loaded_state(report, last_state or ())
                if last_state is not None and state != last_state:
                    log_event("plugins.watch.changed", before=last_state, after=state)
                    _notify(on_change, report)
                last_state = state
        stop.wait(interval)


def _notify(on_change: Callable[[LinkReport], None], report: LinkReport) -> None:
    """A failed reload is logged, not fatal: the watcher must outlive one bad restart."""
    try:
        on_change(report)
    except (RuntimeFailure, OSError) as exc:
        log_event("plugins.watch.reload_failed", error=str(exc))


def _converge_once(data_dir: Path, spec_path: Path, wait_seconds: float) -> LinkReport | None:
    try:
        report = link_plugins(data_dir, spec_path, wait_seconds=wait_seconds)
    except RuntimeFailure as exc:
        log_event("plugins.watch.error", error=str(exc))
        return None
    for failure in report.failures:
        log_event("plugins.watch.plugin_failed", plugin=failure.name, error=failure.error)
    return report


def _spec_names(spec_path: Path) -> list[str]:
    try:
        return [entry.name for entry in load_spec(spec_path) if entry.valid_name]
    except RuntimeFailure:
        return []


def _readlink(path: Path) -> str | None:
    try:
        return os.readlink(path)
    except OSError:
        return None
