"""The agent entrypoint's settings: one dataclass, filled from the environment the chart sets."""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from hermes_runtime.agent.handover import StopTimes
from hermes_runtime.common.errors import RuntimeFailure

N = TypeVar("N", int, float)

DEFAULT_DATA_DIR = Path("/opt/data")
DEFAULT_METRICS_PORT = 9090
DEFAULT_API_PORT = 8642
# The gateway's own port, on loopback, behind the front door on the API port (frontdoor.py).
DEFAULT_GATEWAY_PORT = 18642
DEFAULT_GRACE_SECONDS = 30.0  # Kubernetes' default terminationGracePeriodSeconds
DEFAULT_LOCK_TIMEOUT = 300.0  # longer than any sane grace period of the pod before us
# How long the gateway keeps an Idempotency-Key's answer (idempotency.py): Hermes' own default.
DEFAULT_IDEMPOTENCY_TTL = 300.0
# The entrypoint's control socket (control.py): in a directory only the agent container mounts.
DEFAULT_CONTROL_SOCKET = Path("/run/hermes-runtime/agent.sock")
# Connections the front door holds at once while no gateway accepts (frontdoor.py): each is a
# socket and a task for up to its hold time, and anyone who reaches the API port can open them.
DEFAULT_FRONT_DOOR_MAX_HELD = 256
MAX_FRONT_DOOR_MAX_HELD = 100_000
# Free space the data volume keeps for the turns in flight (datareserve.py): below it /ready
# fails and the front door refuses new connections (503), so no turn is answered that cannot
# be stored (issue 30). 64 MiB: a few hundred turns with their WAL growth; 0 turns it off.
DEFAULT_DATA_MIN_FREE_MIB = 64
MAX_DATA_MIN_FREE_MIB = 1 << 20  # 1 TiB: beyond that a typo, not a reserve
# What the warm gateway imports while the pod waits for the data dir lock (zygote.py): every
# third-party module Hermes 0.19.0 imports from `gateway run` to its first answered turn
# (found with `python -X importtime`; openai's types alone take seconds, and a new gateway
# otherwise imports them on the first turn, which a hand-over's held clients wait for). None
# of them reads HERMES_HOME (tests/integration/agent/test_agent_warm_gateway.py).
DEFAULT_PRELOAD = (
    # What `gateway run` imports before it listens, then what its first turn imports: the
    # preload stops when the lock comes first, so the start never waits for the second half.
    "yaml",
    "dotenv",
    "rich.console",
    "rich.pretty",
    "attr",
    "urllib3",
    "charset_normalizer",
    "requests",
    "idna",
    "certifi",
    "httpx",
    "click",
    "pygments",
    "multidict",
    "yarl",
    "propcache",
    "frozenlist",
    "aiosignal",
    "aiohappyeyeballs",
    "aiohttp",
    "aiohttp.web",
    "websockets",
    "websockets.asyncio.client",
    "websockets.asyncio.server",
    "cryptography",
    "cryptography.hazmat.backends",
    "cryptography.hazmat.primitives.ciphers.aead",
    "pytz",
    "dateutil",
    "six",
    "croniter",
    "typing_extensions",
    "jiter",
    "httpcore",
    "h11",
    "anyio",
    "sniffio",
    "socksio",
    "typing_inspection",
    "annotated_types",
    "pydantic_core",
    "pydantic",
    "distro",
    "openai",
    "openai.types",
    "openai.resources",
    "openai.lib.streaming.chat",
)


@dataclass(frozen=True)
class AgentSettings:
    """Where things are and how to run the gateway; see docs in ``from_env``."""

    data_dir: Path = DEFAULT_DATA_DIR
    plugin_spec: Path | None = None
    seed_config: Path | None = None
    seed_soul: Path | None = None
    secrets_env: Path | None = None
    # The API key as a file (a Secret volume): a new key reaches the gateway without a new pod.
    api_key_file: Path | None = None
    metrics_port: int = DEFAULT_METRICS_PORT
    metrics_host: str = "0.0.0.0"
    api_host: str = "0.0.0.0"
    api_port: int = DEFAULT_API_PORT
    gateway_port: int = DEFAULT_GATEWAY_PORT  # 0: no front door, the gateway owns api_port
    grace_seconds: float = DEFAULT_GRACE_SECONDS
    prestop_seconds: float = 0.0
    handover_seconds: float = 0.0  # preStop: how long to wait for a warm successor pod
    pod_ip: str = ""  # where a stopping pod can forward clients to us ("": nowhere)
    preload: tuple[str, ...] = DEFAULT_PRELOAD  # empty: no warm gateway
    stop_timeout: float | None = None  # None: derived from the grace period (``stop_budget``)
    plugin_wait_seconds: float = 0.0
    watch_interval: float = 5.0
    lock_timeout: float = DEFAULT_LOCK_TIMEOUT
    idempotency_ttl: float = DEFAULT_IDEMPOTENCY_TTL  # 0: Hermes' in-memory cache only
    control_socket: Path = DEFAULT_CONTROL_SOCKET  # where the preStop hook reaches us
    front_door_max_held: int = DEFAULT_FRONT_DOOR_MAX_HELD
    data_min_free_mib: int = DEFAULT_DATA_MIN_FREE_MIB  # 0: no reserve

    @property
    def data_min_free_bytes(self) -> int:
        return self.data_min_free_mib << 20

    @property
    def state_dir(self) -> Path:
        """Where the entrypoint keeps its own records (last seeds applied)."""
        return self.data_dir / ".hermes-runtime"

    @property
    def stop_times(self) -> StopTimes:
        """How the grace period is spent on a stop (the arithmetic: ``handover.StopTimes``)."""
        return StopTimes(
            self.grace_seconds, self.handover_seconds, self.prestop_seconds, self.stop_timeout
        )

    @property
    def stop_budget(self) -> float:
        """Seconds from SIGTERM until we kill the gateway (``StopTimes.stop_budget``)."""
        return self.stop_times.stop_budget

    @property
    def abandon_seconds(self) -> float:
        """After the preStop hook, how long without SIGTERM before the stop is undone."""
        return self.stop_times.abandon_seconds

    @property
    def drain_timeout(self) -> float:
        """Hermes' ``agent.restart_drain_timeout`` (``StopTimes.drain_timeout``)."""
        return self.stop_times.drain_timeout

    @property
    def front_door(self) -> bool:
        """Whether the entrypoint owns the API port and holds clients across gateway restarts."""
        return self.gateway_port != 0

    @property
    def gateway_address(self) -> tuple[str, int]:
        """Where the gateway itself listens: loopback behind the front door, else the API port."""
        if self.front_door:
            return ("127.0.0.1", self.gateway_port)
        return (self.api_host, self.api_port)

    @property
    def home_dir(self) -> Path:
        """``$HOME`` for the gateway: writable and persistent even on a read-only root."""
        return self.data_dir / "home"

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> AgentSettings:
        """Read the env the chart sets; an unset or empty variable means the default.

        ``HERMES_HOME``, ``HERMES_RUNTIME_PLUGIN_SPEC``, ``HERMES_RUNTIME_SEED_CONFIG``,
        ``HERMES_RUNTIME_SEED_SOUL``, ``HERMES_RUNTIME_SECRETS_ENV``,
        ``HERMES_RUNTIME_METRICS_PORT``, ``HERMES_RUNTIME_LOCK_TIMEOUT`` (seconds to wait for
        the data dir lock), ``HERMES_RUNTIME_TERMINATION_GRACE_SECONDS`` and
        ``HERMES_RUNTIME_PRESTOP_SECONDS`` (the pod's ``terminationGracePeriodSeconds`` and
        how long it stays reachable after turning unready, from which the drain time follows),
        ``HERMES_RUNTIME_HANDOVER_SECONDS`` (how long the preStop hook waits for a warm
        successor pod), ``HERMES_RUNTIME_GATEWAY_PRELOAD`` (comma-separated modules the warm
        gateway imports before the lock; ``none``: no warm gateway), ``HERMES_RUNTIME_POD_IP``
        (this pod's address, which it tells the pod it replaces), ``API_SERVER_HOST`` and
        ``API_SERVER_PORT`` (where clients connect: the front door), and
        ``HERMES_RUNTIME_GATEWAY_PORT`` (the gateway's loopback port behind it; 0 turns the
        front door off and lets the gateway listen on the API port itself), and
        ``HERMES_RUNTIME_IDEMPOTENCY_TTL_SECONDS`` (how long the gateway keeps the answer to a
        request with an ``Idempotency-Key`` on the data volume, ``idempotency.py``; 0 leaves
        Hermes' in-memory cache, which a gateway crash empties),
        ``HERMES_RUNTIME_CONTROL_SOCKET`` (the Unix socket the preStop hook, ``agent
        pre-stop``, reaches the entrypoint on; ``control.py``) and
        ``HERMES_RUNTIME_FRONT_DOOR_MAX_HELD`` (how many connections the front door holds at
        once while no gateway accepts; more get an immediate 503), and
        ``HERMES_RUNTIME_DATA_MIN_FREE_MIB`` (the data volume's reserve of free space: below
        it ``/ready`` fails and new API connections get a 503; 0: off; ``datareserve.py``).
        """
        env = os.environ if env is None else env

        def path(name: str) -> Path | None:
            value = env.get(name, "").strip()
            return Path(value) if value else None

        return cls(
            data_dir=path("HERMES_HOME") or DEFAULT_DATA_DIR,
            plugin_spec=path("HERMES_RUNTIME_PLUGIN_SPEC"),
            seed_config=path("HERMES_RUNTIME_SEED_CONFIG"),
            seed_soul=path("HERMES_RUNTIME_SEED_SOUL"),
            secrets_env=path("HERMES_RUNTIME_SECRETS_ENV"),
            api_key_file=path("HERMES_RUNTIME_API_KEY_FILE"),
            metrics_port=_port(env, "HERMES_RUNTIME_METRICS_PORT", DEFAULT_METRICS_PORT),
            api_host=env.get("API_SERVER_HOST", "").strip() or "0.0.0.0",
            api_port=_port(env, "API_SERVER_PORT", DEFAULT_API_PORT),
            gateway_port=_port(env, "HERMES_RUNTIME_GATEWAY_PORT", DEFAULT_GATEWAY_PORT),
            lock_timeout=_seconds(env, "HERMES_RUNTIME_LOCK_TIMEOUT", DEFAULT_LOCK_TIMEOUT),
            grace_seconds=_seconds(
                env, "HERMES_RUNTIME_TERMINATION_GRACE_SECONDS", DEFAULT_GRACE_SECONDS
            ),
            prestop_seconds=_seconds(env, "HERMES_RUNTIME_PRESTOP_SECONDS", 0.0),
            handover_seconds=_seconds(env, "HERMES_RUNTIME_HANDOVER_SECONDS", 0.0),
            pod_ip=env.get("HERMES_RUNTIME_POD_IP", "").strip(),
            preload=_modules(env.get("HERMES_RUNTIME_GATEWAY_PRELOAD", "")),
            idempotency_ttl=_seconds(
                env, "HERMES_RUNTIME_IDEMPOTENCY_TTL_SECONDS", DEFAULT_IDEMPOTENCY_TTL
            ),
            control_socket=path("HERMES_RUNTIME_CONTROL_SOCKET") or DEFAULT_CONTROL_SOCKET,
            front_door_max_held=_number(
                env,
                "HERMES_RUNTIME_FRONT_DOOR_MAX_HELD",
                DEFAULT_FRONT_DOOR_MAX_HELD,
                int,
                "a number of connections",
                lambda v: 1 <= v <= MAX_FRONT_DOOR_MAX_HELD,
                f"1-{MAX_FRONT_DOOR_MAX_HELD}",
            ),
            data_min_free_mib=_number(
                env,
                "HERMES_RUNTIME_DATA_MIN_FREE_MIB",
                DEFAULT_DATA_MIN_FREE_MIB,
                int,
                "a number of MiB",
                lambda v: 0 <= v <= MAX_DATA_MIN_FREE_MIB,
                f"0-{MAX_DATA_MIN_FREE_MIB}",
            ),
        )


def _modules(raw: str) -> tuple[str, ...]:
    """The preload list: empty means the default, ``none`` means no warm gateway."""
    names = tuple(name.strip() for name in raw.split(",") if name.strip())
    if not names:
        return DEFAULT_PRELOAD
    if names == ("none",):
        return ()
    bad = [name for name in names if not all(part.isidentifier() for part in name.split("."))]
    if bad:
        raise RuntimeFailure(
            f"HERMES_RUNTIME_GATEWAY_PRELOAD: {', '.join(bad)} is no module name "
            "(a comma-separated list of modules, or none)"
        )
    return names


def _port(env: Mapping[str, str], name: str, default: int) -> int:
    return _number(env, name, default, int, "a port number", lambda v: 0 <= v <= 65535, "0-65535")


def _seconds(env: Mapping[str, str], name: str, default: float) -> float:
    return _number(
        env, name, default, float, "a number of seconds", lambda v: 0 <= v < math.inf, ">= 0"
    )


def _number(
    env: Mapping[str, str],
    name: str,
    default: N,
    convert: Callable[[str], N],
    what: str,
    valid: Callable[[N], bool],
    allowed: str,
) -> N:
    """``env[name]`` as a number, ``default`` when unset or empty; the error names the variable."""
    raw = env.get(name, "").strip()
    if not raw:
        return default
    try:
        value = convert(raw)
    except ValueError:
        raise RuntimeFailure(f"{name}={raw!r} is not {what}") from None
    if not valid(value):
        raise RuntimeFailure(f"{name}={raw} is outside {allowed}")
    return value
