"""What restarts the gateway while it runs: new plugin commits and rotated secrets.

Both end in ``Supervisor.request_restart`` (quiesce, SIGUSR1, exit 75, new gateway; the one
restart path of ``restart.py``). The secrets files are small local files (a Vault render, a
Secret volume): their digest is compared every ``watch_interval`` on the event loop (a
Secret volume's update is a symlink swap no stdlib call reports). The plugin watcher is the
plugins package's blocking ``watch`` loop (git-sync's checkouts, the spec): it runs on its
own thread, the one thread this needs, and only asks the supervisor (thread-safe) to act.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import threading
from collections.abc import AsyncIterator
from pathlib import Path

from hermes_runtime.agent.metrics import AgentMetrics
from hermes_runtime.agent.settings import AgentSettings
from hermes_runtime.agent.supervisor import Supervisor
from hermes_runtime.common.logs import log_event
from hermes_runtime.plugins import LinkReport, watch_links


@contextlib.asynccontextmanager
async def watching(
    settings: AgentSettings,
    supervisor: Supervisor,
    metrics: AgentMetrics,
    baseline: LinkReport | None,
) -> AsyncIterator[None]:
    """Watch plugins (when there is a spec file) and secrets files while the block runs."""
    stop = threading.Event()
    thread = None
    spec = settings.plugin_spec
    if spec is not None and spec.exists():  # no spec file: no plugins, nothing to watch
        thread = threading.Thread(
            target=_watch_plugins,
            args=(settings, spec, supervisor, metrics, baseline, stop),
            name="plugins-watch",
            daemon=True,
        )
        thread.start()
    watched = [path for path in (settings.secrets_env, settings.api_key_file) if path is not None]
    secrets = (
        asyncio.create_task(_watch_secrets(watched, supervisor, settings.watch_interval))
        if watched
        else None
    )
    try:
        yield
    finally:
        stop.set()
        if secrets is not None:
            secrets.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await secrets
        if thread is not None:
            await asyncio.to_thread(thread.join, 5)


def _watch_plugins(
    settings: AgentSettings,
    spec: Path,
    supervisor: Supervisor,
    metrics: AgentMetrics,
    baseline: LinkReport | None,
    stop: threading.Event,
) -> None:
    """Run the plugins package's watcher; a change restarts the gateway, counted under
    ``plugins-changed``. Every convergence, a failed one too, goes to the metrics."""

    def on_change(link_report: LinkReport) -> None:
        supervisor.request_restart("plugins-changed")

    watch_links(
        settings.data_dir,
        spec,
        on_change,
        stop,
        interval=min(settings.watch_interval, 1.0),
        baseline=baseline,
        on_report=metrics.record_link_report,
    )


def _digest(path: Path) -> str | None:
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:
        return None


async def _watch_secrets(paths: list[Path], supervisor: Supervisor, interval: float) -> None:
    """Restart the gateway when a secrets file changes (the rendered Vault env file, the API
    key's Secret volume): its env is read at start. A file that cannot be read (the kubelet
    swapping a Secret volume's files) keeps its last digest."""
    last = {path: _digest(path) for path in paths}
    while True:
        await asyncio.sleep(interval)
        changed = []
        for path in paths:
            current = _digest(path)
            if current is not None and current != last[path]:
                changed.append(path)
            if current is not None:
                last[path] = current
        for path in changed:
            log_event("agent.secrets.changed", file=str(path))
        if changed:
            supervisor.request_restart("secrets-changed")
