"""``agent prepare`` and ``agent run``: seed the data dir, link plugins, supervise the gateway.

``agent run``, in order: the data dir lock (``datalock.py``; meanwhile the warm gateway imports,
``zygote.py``, and this pod announces itself as a successor, ``successor.py``), ``prepare``,
then everything else on one ``asyncio`` event loop until the pod is gone: the supervisor
(``supervisor.py``), the hand-over (``handover.py``, which owns the stop), the front door
(``frontdoor.py``), ``/metrics`` and ``/ready`` (``endpoints.py``), the control socket
(``control.py``) and the restart watchers (``watchers.py``). Signals are the loop's own
handlers; the only threads are the plugin watcher's and the filesystem reads of ``/ready``.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import os
import signal
import subprocess
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from hermes_runtime.agent.control import ControlServer
from hermes_runtime.agent.datalock import (
    DataDirLock,
    hold_data_dir_lock,
    lock_path,
    open_lock_file,
    release_data_dir_lock,
)
from hermes_runtime.agent.datareserve import DataReserve
from hermes_runtime.agent.endpoints import Endpoints, Readiness
from hermes_runtime.agent.frontdoor import DoorPolicy, FrontDoor
from hermes_runtime.agent.gateway import gateway_command, gateway_env
from hermes_runtime.agent.handover import HandOver
from hermes_runtime.agent.hook import PRE_STOP
from hermes_runtime.agent.metrics import AgentMetrics, secrets_status_path
from hermes_runtime.agent.seed import SeedResult, seed_config, seed_soul
from hermes_runtime.agent.settings import AgentSettings
from hermes_runtime.agent.successor import Announcement, RelayPolicy, Successor, answer_proof
from hermes_runtime.agent.supervisor import (
    FirstGateway,
    GatewayLaunch,
    Supervisor,
    SupervisorPolicy,
)
from hermes_runtime.agent.watchers import watching
from hermes_runtime.agent.zygote import Zygote, start_zygote
from hermes_runtime.backup import backup_status_path
from hermes_runtime.backup.selection import make_excluder
from hermes_runtime.common.errors import RuntimeFailure
from hermes_runtime.common.groupaccess import share_tree, shared_umask
from hermes_runtime.common.logs import log_event
from hermes_runtime.plugins import LinkReport, link_plugins


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
    """The data dir must exist and be writable: it is a PVC, never created by us at its root.

    Our folders in it are ``0770``: ``replicate`` and ``backup`` run as other UIDs and reach
    them through the pod's group (``common/groupaccess.py``)."""
    data_dir = settings.data_dir
    if not data_dir.is_dir():
        raise RuntimeFailure(f"data dir {data_dir} (HERMES_HOME) does not exist or is no directory")
    if not os.access(data_dir, os.W_OK | os.X_OK):
        raise RuntimeFailure(
            f"data dir {data_dir} (HERMES_HOME) is not writable by UID {os.getuid()}: "
            "set the pod's fsGroup so the volume is group-writable"
        )
    settings.state_dir.mkdir(mode=0o770, exist_ok=True)
    settings.home_dir.mkdir(mode=0o770, exist_ok=True)


def share_data_dir(settings: AgentSettings) -> None:
    """Give the pod's group what this UID owns in the data dir (a volume from before the
    roles had UIDs of their own, or files Hermes narrowed), once per start.

    Left as they are: what the backup leaves out (``selection.DEFAULT_EXCLUDES``: plugin
    trees under ``.git-sync``, caches, credential stores such as ``.env`` and ``auth.json``,
    the private ``idempotency.db``, other roles' state), since no other role reads or
    writes those; and everything another UID owns. A failure is logged, never fatal: the
    agent runs, and a backup that cannot read a file says which."""
    started = time.monotonic()
    excluder = make_excluder()
    try:
        shared = share_tree(settings.data_dir, excluder.excluded)
    except OSError as exc:
        log_event("agent.data_dir.share_failed", level="warning", error=str(exc))
        return
    log_event(
        "agent.data_dir.shared",
        widened=shared.widened,
        not_owned=shared.not_owned,
        seconds=round(time.monotonic() - started, 3),
    )


@shared_umask()
def prepare(settings: AgentSettings) -> PrepareReport:
    """Share the data dir with the pod's group, seed ``config.yaml``/``SOUL.md`` (keeping user
    edits) and link the plugins."""
    ensure_data_dir(settings)
    share_data_dir(settings)
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


@shared_umask()
def run_agent(settings: AgentSettings, metrics: AgentMetrics | None = None) -> int:
    """Prepare, then run the gateway in the foreground until SIGTERM/SIGINT; return its status.

    Under the shared umask, which every gateway inherits: the folders and files Hermes makes
    are group-writable for ``replicate`` and readable for ``backup`` (``common/groupaccess.py``).
    SQLite creates a database ``0644`` under any umask (its ``-wal`` and ``-shm`` take the
    database's mode): a database born in this run is widened by the next start's walk.

    First the data dir lock (one gateway per volume); while waiting for it, the gateway process
    is already started and imports its libraries (``zygote.py``), and once warm this pod
    announces itself as the successor, which ends the old pod's preStop wait. Then ``_serve``.
    """
    metrics = metrics or AgentMetrics(
        backup_status_file=backup_status_path(settings.data_dir),
        secrets_refresh_status=secrets_status_path(settings.secrets_env),
    )
    ensure_data_dir(settings)
    path = lock_path(settings.state_dir)
    # One gateway per data volume: wait for the one before us (a pod being replaced) to exit
    # before touching config.yaml, the plugin links or the databases.
    me = _announced(settings)
    with open_lock_file(path) as fd, _warm_gateway(settings, fd) as zygote:
        ready = zygote.warm if zygote is not None else (lambda: True)
        with (
            Announcement(settings.state_dir, ready, me) as announcement,
            hold_data_dir_lock(
                path, settings.lock_timeout, fd=fd, while_waiting=announcement.announce
            ) as lock,
        ):
            announcement.close()  # the lock is ours: we are nobody's successor any more
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
    first = functools.partial(_take_warm, zygote) if zygote is not None else None
    status = asyncio.run(_serve(settings, metrics, lock, report.plugins, first))
    log_event("agent.run.exit", status=status)
    return status


async def _serve(
    settings: AgentSettings,
    metrics: AgentMetrics,
    lock: DataDirLock,
    plugins: LinkReport | None,
    first: FirstGateway | None,
) -> int:
    """Run the gateway with everything around it until it exits, then hand the pod over.

    SIGTERM/SIGINT go to the hand-over (``HandOver.terminate``), which stops the gateway
    through the supervisor; SIGHUP restarts the gateway."""
    supervisor = Supervisor(
        GatewayLaunch(
            tuple(gateway_command()),
            lambda: gateway_env(settings),
            cwd=settings.data_dir,
            pass_fds=(lock.fd,),
            stop_signal=signal.SIGINT,  # Hermes' intentional stop: exit 0, no marker
        ),
        SupervisorPolicy(stop_timeout=settings.stop_budget, drain_dir=settings.data_dir),
        metrics=metrics,
    )
    api_key = _api_key(settings)
    relay = RelayPolicy(api_key, _announced(settings), settings.relay_cidrs)
    handover = HandOver(
        settings.stop_times, settings.state_dir, supervisor.request_stop, relay=relay
    )
    supervisor.install_signal_handlers(on_stop=handover.terminate)
    policy = DoorPolicy(max_held=settings.front_door_max_held, limits=settings.front_door_limits)
    reserve = DataReserve(settings.data_dir, settings.data_min_free_bytes)
    metrics.front_door_max_held.set(policy.max_held)
    metrics.data_volume_reserve.set(settings.data_min_free_bytes)
    async with contextlib.AsyncExitStack() as servers:
        door = await _front_door(servers, settings, handover, supervisor, policy, metrics, reserve)
        readiness = _readiness(settings, supervisor, handover, policy.hold_seconds, reserve)
        await _endpoints(servers, settings, metrics, readiness, api_key)
        await _control(servers, settings, handover)
        async with watching(settings, supervisor, metrics, plugins):
            status = await supervisor.run(first)
        # Nothing of ours writes to the volume any more: let the successor in at once.
        supervisor.end_leftovers()
        release_data_dir_lock(lock)
        if handover.terminating:
            await handover.linger(settings.stop_budget, door)
    return status


async def _front_door(
    servers: contextlib.AsyncExitStack,
    settings: AgentSettings,
    handover: HandOver,
    supervisor: Supervisor,
    policy: DoorPolicy,
    metrics: AgentMetrics,
    reserve: DataReserve,
) -> FrontDoor | None:
    """Own the API port for the container's life, so gateway restarts never close it."""
    if not settings.front_door:
        return None
    door = FrontDoor(
        (settings.api_host, settings.api_port),
        settings.gateway_address,
        lambda: handover.route(supervisor),
        policy=policy,
        metrics=metrics,
        reserve=reserve,
    )
    try:
        await door.start()
    except OSError as exc:
        raise RuntimeFailure(
            f"cannot listen on the API port {settings.api_host}:{settings.api_port} "
            f"(API_SERVER_PORT): {exc.strerror}"
        ) from exc
    servers.push_async_callback(door.stop)
    return door


def _readiness(
    settings: AgentSettings,
    supervisor: Supervisor,
    handover: HandOver,
    hold: float,
    reserve: DataReserve,
) -> Readiness:
    host, port = settings.gateway_address
    local = "127.0.0.1" if host in ("0.0.0.0", "::", "") else host
    return Readiness(
        data_dir=settings.data_dir,
        state_dir=settings.state_dir,
        gateway=(local, port),
        gateway_running=lambda: supervisor.running,
        # Behind the front door a restart only delays requests: stay ready meanwhile.
        gateway_restarting=(
            (lambda: supervisor.restarting(hold)) if settings.front_door else (lambda: False)
        ),
        stop_verdict=handover.stop_verdict,
        reserve=reserve,
    )


async def _endpoints(
    servers: contextlib.AsyncExitStack,
    settings: AgentSettings,
    metrics: AgentMetrics,
    readiness: Readiness,
    api_key: Callable[[], str],
) -> None:
    """``/metrics`` and ``/ready`` on the metrics port (0 disables them), and the proof a
    stopping pod asks of its successor before relaying (``successor.py``)."""
    if settings.metrics_port == 0:
        return
    me = _announced(settings)
    endpoints = Endpoints(
        metrics,
        readiness,
        settings.metrics_port,
        settings.metrics_host,
        limits=settings.http_limits,
        prove=lambda nonce: answer_proof(api_key(), nonce, me),
    )
    try:
        await endpoints.start()
    except OSError as exc:
        raise RuntimeFailure(
            f"cannot serve metrics on port {settings.metrics_port} "
            f"(HERMES_RUNTIME_METRICS_PORT): {exc.strerror}"
        ) from exc
    servers.push_async_callback(endpoints.stop)


async def _control(
    servers: contextlib.AsyncExitStack, settings: AgentSettings, handover: HandOver
) -> None:
    """The control socket the preStop hook (``agent pre-stop``) asks for the hand-over on.

    Without it the pod still stops cleanly on SIGTERM, only without waiting for a successor:
    a socket that cannot be made (no ``control`` volume, e.g. ``agent run`` outside the
    chart) is logged, not fatal."""
    server = ControlServer(settings.control_socket, {PRE_STOP: handover.pre_stop})
    try:
        settings.control_socket.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        await server.start()
    except OSError as exc:
        log_event(
            "agent.control.unavailable",
            level="warning",
            socket=str(settings.control_socket),
            error=exc.strerror or str(exc),
            effect="the preStop hook cannot ask for the hand-over: no wait for a successor",
        )
        return
    servers.push_async_callback(server.stop)


KEY_REREAD_SECONDS = 5.0


def _announced(settings: AgentSettings) -> Successor:
    """Where this pod says it can be reached, as a successor (``host`` empty: nowhere)."""
    return Successor(settings.pod_ip, settings.api_port, settings.metrics_port)


def _api_key(settings: AgentSettings) -> Callable[[], str]:
    """The release's API key as the gateway gets it (env, key file, secrets file; never the
    data dir's ``.env``, which the agent writes), for successor proofs: read again at most
    every ``KEY_REREAD_SECONDS``, since the proof path is open to every pod ("": none)."""
    cached: dict[str, tuple[float, str]] = {}

    def read() -> str:
        now = time.monotonic()
        if "key" in cached and now - cached["key"][0] < KEY_REREAD_SECONDS:
            return cached["key"][1]
        try:
            key = gateway_env(settings).get("API_SERVER_KEY", "")
        except RuntimeFailure:
            key = ""
        cached["key"] = (now, key)
        return key

    return read
