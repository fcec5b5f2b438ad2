"""``agent prepare`` and ``agent run``: seed the data dir, link plugins, supervise the gateway."""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import hashlib
import os
import subprocess
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hermes_runtime.agent.datalock import (
    DataDirLock,
    Successor,
    hold_data_dir_lock,
    lock_path,
    open_lock_file,
    release_data_dir_lock,
    waiting_successor,
)
from hermes_runtime.agent.endpoints import Readiness, serve_endpoints
from hermes_runtime.agent.frontdoor import DoorPolicy, FrontDoor, GatewayState
from hermes_runtime.agent.gateway import gateway_command, gateway_env, mark_planned_stop
from hermes_runtime.agent.metrics import AgentMetrics
from hermes_runtime.agent.seed import SeedResult, seed_config, seed_soul
from hermes_runtime.agent.settings import AgentSettings
from hermes_runtime.agent.supervisor import Supervisor
from hermes_runtime.agent.zygote import Zygote, start_zygote
from hermes_runtime.backup import backup_status_path
from hermes_runtime.common.errors import RuntimeFailure
from hermes_runtime.common.logs import log_event
from hermes_runtime.plugins import LinkReport, link_plugins, watch

DOOR_POLICY = DoorPolicy()


@dataclass
class PrepareReport:
    """What ``prepare`` did; ``plugins`` is ``None`` when there is no plugin spec file."""

    config: SeedResult
    soul: SeedResult
    plugins: LinkReport | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.plugins is None or self.plugins.ok

    def as_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "config": self.config.as_dict(),
            "soul": self.soul.as_dict(),
            "plugins": _link_report_dict(self.plugins),
            "notes": self.notes,
        }


def _link_report_dict(report: LinkReport | None) -> Any:
    if report is None:
        return None
    return {"ok": report.ok, "results": [dataclasses.asdict(r) for r in report.results]}


def ensure_data_dir(settings: AgentSettings) -> None:
    """The data dir must exist and be writable: it is a PVC, never created by us at its root."""
    data_dir = settings.data_dir
    if not data_dir.is_dir():
        raise RuntimeFailure(f"data dir {data_dir} (HERMES_HOME) does not exist or is no directory")
    if not os.access(data_dir, os.W_OK | os.X_OK):
        raise RuntimeFailure(
            f"data dir {data_dir} (HERMES_HOME) is not writable by UID {os.getuid()}: "
            "set the pod's fsGroup so the volume is group-writable"
        )
    settings.state_dir.mkdir(mode=0o750, exist_ok=True)
    settings.home_dir.mkdir(mode=0o750, exist_ok=True)


def prepare(settings: AgentSettings) -> PrepareReport:
    """Seed ``config.yaml``/``SOUL.md`` (keeping user edits) and link the plugins."""
    ensure_data_dir(settings)
    report = PrepareReport(
        config=seed_config(
            settings.seed_config, settings.data_dir / "config.yaml", settings.state_dir
        ),
        soul=seed_soul(settings.seed_soul, settings.data_dir / "SOUL.md", settings.state_dir),
    )
    spec = settings.plugin_spec
    if spec is not None and spec.exists():
        report.plugins = link_plugins(
            settings.data_dir, spec, wait_seconds=settings.plugin_wait_seconds
        )
    elif spec is not None:
        report.notes.append(f"plugin spec {spec} does not exist: no plugins linked")
    log_event("agent.prepare", **report.as_dict())
    return report


def run_agent(settings: AgentSettings, metrics: AgentMetrics | None = None) -> int:
    """Prepare, then run the gateway in the foreground until SIGTERM/SIGINT; return its status.

    First the data dir lock (one gateway per volume); while waiting for it, the gateway process
    is already started and imports its libraries (``zygote.py``), and once warm this pod
    announces itself as the successor, which ends the old pod's preStop wait. Side jobs run on
    daemon threads while the gateway runs: ``/metrics``, ``/ready`` and ``/pre-stop``, the
    plugin watcher (graceful gateway restart when a plugin's commit or the spec changes) and
    the secrets file watcher (restart when Vault renders new values, so the gateway sees them
    in its env).
    """
    metrics = metrics or AgentMetrics(backup_status_file=backup_status_path(settings.data_dir))
    ensure_data_dir(settings)
    path = lock_path(settings.state_dir)
    # One gateway per data volume: wait for the one before us (a pod being replaced) to exit
    # before touching config.yaml, the plugin links or the databases.
    me = Successor(settings.pod_ip, settings.api_port, settings.metrics_port)
    with open_lock_file(path) as fd, _warm_gateway(settings, fd) as zygote:
        ready = zygote.warm if zygote is not None else (lambda: True)
        with hold_data_dir_lock(path, settings.lock_timeout, fd=fd, ready=ready, me=me) as lock:
            return _run_locked(settings, metrics, lock, zygote)


@contextlib.contextmanager
def _warm_gateway(settings: AgentSettings, lock_fd: int) -> Iterator[Zygote | None]:
    """The first gateway, started before the lock to import while it waits; None: disabled.

    It inherits the lock's descriptor, so it holds the lock with us once we take it. Unused
    (the wait timed out, a stop came first, the env changed): it exits without running."""
    if not settings.preload:
        yield None
        return
    zygote = start_zygote(
        gateway_command(),
        gateway_env(settings),  # also fails now, before the wait, without an API key
        settings.preload,
        cwd=settings.data_dir,
        pass_fds=(lock_fd,),
    )
    try:
        yield zygote
    finally:
        zygote.discard()


def _take_warm(zygote: Zygote, env: Mapping[str, str]) -> subprocess.Popen[bytes] | None:
    """The supervisor's first gateway: the warm one, unless its env is no longer the one to
    use (a secret rotated while we waited) or it died; then a fresh one starts."""
    if dict(env) != zygote.env or zygote.proc.poll() is not None:
        reason = "env changed" if zygote.proc.poll() is None else "exited"
        log_event("agent.gateway.warm_discarded", reason=reason)
        zygote.discard()
        return None
    zygote.warm()
    log_event("agent.gateway.warm", pid=zygote.proc.pid, preload=zygote.report)
    return zygote.go()


def _run_locked(
    settings: AgentSettings, metrics: AgentMetrics, lock: DataDirLock, zygote: Zygote | None
) -> int:
    report = prepare(settings)
    if report.plugins is not None:
        metrics.record_link_report(report.plugins)
    gateway_env(settings)  # fail now, with a clear message, rather than in a restart loop
    supervisor = Supervisor(
        gateway_command(),
        lambda: gateway_env(settings),
        stop_timeout=settings.stop_budget,
        metrics=metrics,
        cwd=settings.data_dir,
        before_stop=lambda pid: mark_planned_stop(settings.data_dir, pid),
        drain_dir=settings.data_dir,
        pass_fds=(lock.fd,),
        prestarted=functools.partial(_take_warm, zygote) if zygote is not None else None,
    )
    supervisor.install_signal_handlers()
    readiness = _readiness(settings, supervisor)
    stop = threading.Event()
    with (
        _front_door(settings, supervisor, metrics, readiness) as door,
        _endpoints(metrics, settings, readiness),
    ):
        with _side_jobs(settings, supervisor, metrics, report, stop):
            status = supervisor.run()
        # Nothing of ours writes to the volume any more: let the successor in at once.
        supervisor.end_leftovers()
        release_data_dir_lock(lock)
        if supervisor.stop_requested:
            _stay_reachable(readiness, door, settings.stop_budget)
    log_event("agent.run.exit", status=status)
    return status


def _stay_reachable(readiness: Readiness, door: FrontDoor | None, budget: float) -> None:
    """After a stop, keep the API port open until the endpoints have dropped this pod: an
    address that vanishes while kube-proxy still sends to it makes clients' connects hang
    instead of fail. New connections meanwhile go to the successor (or are closed at once),
    and connections already forwarded there finish. At most ``budget`` seconds."""
    deadline = time.monotonic() + budget
    logged = False
    while time.monotonic() < deadline:
        remaining = max(readiness.reachable_for(), 0.1 if door is not None and door.active else 0)
        if remaining <= 0:
            return
        if not logged:
            log_event("agent.stop.reachable", relay=readiness.relay_address() is not None)
            logged = True
        time.sleep(min(remaining, 0.2))


@contextlib.contextmanager
def _front_door(
    settings: AgentSettings, supervisor: Supervisor, metrics: AgentMetrics, readiness: Readiness
) -> Iterator[FrontDoor | None]:
    """Own the API port for the container's life, so gateway restarts never close it."""
    if not settings.front_door:
        yield None
        return
    door = FrontDoor(
        (settings.api_host, settings.api_port),
        settings.gateway_address,
        GatewayState(
            replacing=lambda: supervisor.replacing,
            stopping=lambda: supervisor.stop_requested,
            running=lambda: supervisor.running,
            relay=readiness.relay_address,
        ),
        policy=DOOR_POLICY,
        metrics=metrics,
    )
    try:
        door.start()
    except OSError as exc:
        raise RuntimeFailure(
            f"cannot listen on the API port {settings.api_host}:{settings.api_port} "
            f"(API_SERVER_PORT): {exc.strerror}"
        ) from exc
    try:
        yield door
    finally:
        door.stop()


def _readiness(settings: AgentSettings, supervisor: Supervisor) -> Readiness:
    host, port = settings.gateway_address
    local = "127.0.0.1" if host in ("0.0.0.0", "::", "") else host
    return Readiness(
        data_dir=settings.data_dir,
        state_dir=settings.state_dir,
        health_url=f"http://{local}:{port}/health",
        gateway_running=lambda: supervisor.running,
        # Behind the front door a restart only delays requests: stay ready meanwhile.
        gateway_restarting=(
            (lambda: supervisor.restarting(DOOR_POLICY.hold_seconds))
            if settings.front_door
            else (lambda: False)
        ),
        stop_requested=lambda: supervisor.stop_requested,
        prestop_seconds=settings.prestop_seconds,
        successor=lambda: waiting_successor(settings.state_dir),
        handover_seconds=settings.handover_seconds,
    )


@contextlib.contextmanager
def _endpoints(
    metrics: AgentMetrics, settings: AgentSettings, readiness: Readiness
) -> Iterator[None]:
    """``/metrics``, ``/ready`` and ``/pre-stop`` on the metrics port (0 disables them)."""
    if settings.metrics_port == 0:
        yield
        return
    try:
        server = serve_endpoints(metrics, readiness, settings.metrics_port, settings.metrics_host)
    except OSError as exc:
        raise RuntimeFailure(
            f"cannot serve metrics on port {settings.metrics_port} "
            f"(HERMES_RUNTIME_METRICS_PORT): {exc.strerror}"
        ) from exc
    try:
        yield
    finally:
        server.shutdown()


@contextlib.contextmanager
def _side_jobs(
    settings: AgentSettings,
    supervisor: Supervisor,
    metrics: AgentMetrics,
    report: PrepareReport,
    stop: threading.Event,
) -> Iterator[None]:
    threads = []
    spec = settings.plugin_spec
    if spec is not None and spec.exists():  # no spec file: no plugins, nothing to watch
        threads.append(_start(_watch_plugins, settings, spec, supervisor, metrics, report, stop))
    if settings.secrets_env is not None:
        threads.append(_start(_watch_secrets, settings.secrets_env, supervisor, stop, settings))
    try:
        yield
    finally:
        stop.set()
        for thread in threads:
            thread.join(timeout=5)


def _start(target: Any, *args: Any) -> threading.Thread:
    thread = threading.Thread(target=target, args=args, name=target.__name__, daemon=True)
    thread.start()
    return thread


def _watch_plugins(
    settings: AgentSettings,
    spec: Path,
    supervisor: Supervisor,
    metrics: AgentMetrics,
    report: PrepareReport,
    stop: threading.Event,
) -> None:
    """Run the plugins package's watcher; a change restarts the gateway through the
    supervisor's one restart path (quiesce, SIGUSR1, exit 75, new gateway), counted under
    ``plugins-changed``."""

    def on_change(link_report: LinkReport) -> None:
        metrics.record_link_report(link_report)
        supervisor.request_restart("plugins-changed")

    watch(
        settings.data_dir,
        spec,
        on_change,
        stop,
        interval=min(settings.watch_interval, 1.0),
        baseline=report.plugins,
    )


def _digest(path: Path) -> str | None:
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:
        return None


def _watch_secrets(
    path: Path, supervisor: Supervisor, stop: threading.Event, settings: AgentSettings
) -> None:
    """Restart the gateway when the rendered secrets file changes (its env is read at start)."""
    last = _digest(path)
    while not stop.wait(settings.watch_interval):
        current = _digest(path)
        if current is not None and current != last:
            log_event("agent.secrets.changed", file=str(path))
            supervisor.request_restart("secrets-changed")
        if current is not None:
            last = current
