"""The agent entrypoint's settings: one pydantic model, ``AgentSettings``, filled from the
environment the chart sets; each field holds its default, its variable and its rule, so the
three can never disagree."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Annotated

from pydantic import BeforeValidator, ConfigDict, Field, IPvAnyNetwork, ValidationError
from pydantic_core import ErrorDetails

from hermes_runtime.agent.handover import StopTimes
from hermes_runtime.common.boundedhttp import HttpLimitsEnv, ServerLimits
from hermes_runtime.common.datadir import DATA_DIR_ENV, DEFAULT_DATA_DIR, resolve_data_dir
from hermes_runtime.common.envsettings import given_values
from hermes_runtime.common.errors import RuntimeFailure

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
# Connections open on the API port at once, and from one address: each is two sockets and a
# task. The per-address cap keeps room for the kubelet's liveness probe when one pod floods
# the port; it is high because clients behind an ingress controller share its address.
DEFAULT_FRONT_DOOR_MAX_CONNECTIONS = 4096
DEFAULT_FRONT_DOOR_MAX_PER_PEER = 1024
MAX_FRONT_DOOR_CONNECTIONS = 1_000_000
# Free space the data volume keeps for the turns in flight (datareserve.py): below it /ready
# fails and the front door refuses new connections (503), so no turn is answered that cannot
# be stored. 64 MiB: a few hundred turns with their WAL growth; 0 turns it off.
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


def _modules(raw: object) -> object:
    """The preload list: empty means the default, ``none`` means no warm gateway."""
    if not isinstance(raw, str):
        return raw  # a tuple given by name
    names = tuple(name.strip() for name in raw.split(",") if name.strip())
    if not names:
        return DEFAULT_PRELOAD
    if names == ("none",):
        return ()
    bad = [name for name in names if not all(part.isidentifier() for part in name.split("."))]
    if bad:
        raise ValueError(
            f"{', '.join(bad)} is no module name (a comma-separated list of modules, or none)"
        )
    return names


def _cidrs(raw: object) -> object:
    """A comma-separated list of CIDRs (empty: none)."""
    if not isinstance(raw, str):
        return raw  # a tuple given by name
    return tuple(part.strip() for part in raw.split(",") if part.strip())


Port = Annotated[int, Field(ge=0, le=65535)]
Seconds = Annotated[float, Field(ge=0)]
ModuleNames = Annotated[tuple[str, ...], BeforeValidator(_modules)]
Networks = Annotated[tuple[IPvAnyNetwork, ...], BeforeValidator(_cidrs)]


class AgentSettings(HttpLimitsEnv):
    """The entrypoint's settings: each field's default, environment variable and rule together.

    The chart sets the variables (``validation_alias``); ``from_environ`` reads them, and an
    unset or blank one means the default. Fields without a variable (``metrics_host``,
    ``stop_timeout``, ``plugin_wait_seconds``, ``watch_interval``) come from the command line
    or from tests, by name. The chart's values.schema.json states the same ranges
    (tests/chart/test_chart_runtime_rules.py). The small HTTP ports' caps come from
    ``HttpLimitsEnv`` (``common/boundedhttp.py``), which the gateway process reads too, for
    LCM's port.
    """

    model_config = ConfigDict(
        extra="forbid",
        allow_inf_nan=False,
        frozen=True,
        validate_by_name=True,
        validate_by_alias=True,
    )

    # Hermes' own data dir (``common/datadir.py`` resolves it, for every process alike).
    data_dir: Path = Field(DEFAULT_DATA_DIR, validation_alias=DATA_DIR_ENV)
    plugin_spec: Path | None = Field(None, validation_alias="HERMES_RUNTIME_PLUGIN_SPEC")
    seed_config: Path | None = Field(None, validation_alias="HERMES_RUNTIME_SEED_CONFIG")
    seed_soul: Path | None = Field(None, validation_alias="HERMES_RUNTIME_SEED_SOUL")
    # Rendered by the Vault sidecar; merged into the gateway's environment, and the refresher
    # notes its outcome beside it (``metrics.SecretsRefreshCollector``).
    secrets_env: Path | None = Field(None, validation_alias="HERMES_RUNTIME_SECRETS_ENV")
    # The API key as a file (a Secret volume): a new key reaches the gateway without a new pod.
    api_key_file: Path | None = Field(None, validation_alias="HERMES_RUNTIME_API_KEY_FILE")
    metrics_port: Port = Field(DEFAULT_METRICS_PORT, validation_alias="HERMES_RUNTIME_METRICS_PORT")
    metrics_host: str = "0.0.0.0"
    # Where clients connect: the front door (or the gateway itself, gateway_port 0).
    api_host: str = Field("0.0.0.0", validation_alias="API_SERVER_HOST")
    api_port: Port = Field(DEFAULT_API_PORT, validation_alias="API_SERVER_PORT")
    # 0: no front door, the gateway owns api_port.
    gateway_port: Port = Field(DEFAULT_GATEWAY_PORT, validation_alias="HERMES_RUNTIME_GATEWAY_PORT")
    # The pod's terminationGracePeriodSeconds, how long it stays reachable after turning
    # unready, and how long the preStop hook waits for a warm successor (handover.StopTimes).
    grace_seconds: Seconds = Field(
        DEFAULT_GRACE_SECONDS, validation_alias="HERMES_RUNTIME_TERMINATION_GRACE_SECONDS"
    )
    prestop_seconds: Seconds = Field(0.0, validation_alias="HERMES_RUNTIME_PRESTOP_SECONDS")
    handover_seconds: Seconds = Field(0.0, validation_alias="HERMES_RUNTIME_HANDOVER_SECONDS")
    # This pod's address, told to the pod it replaces (which forwards new clients here; "":
    # nowhere).
    pod_ip: str = Field("", validation_alias="HERMES_RUNTIME_POD_IP")
    # Comma-separated modules the warm gateway imports before the lock; ``none``: no warm one.
    preload: ModuleNames = Field(DEFAULT_PRELOAD, validation_alias="HERMES_RUNTIME_GATEWAY_PRELOAD")
    # None: derived from the grace period (``stop_budget``); ``--stop-timeout`` sets it.
    stop_timeout: Seconds | None = None
    plugin_wait_seconds: Seconds = 0.0  # ``--wait``
    watch_interval: float = Field(5.0, gt=0)
    # Seconds to wait for the data dir lock a previous pod holds.
    lock_timeout: float = Field(
        DEFAULT_LOCK_TIMEOUT, validation_alias="HERMES_RUNTIME_LOCK_TIMEOUT", ge=1
    )
    # How long an Idempotency-Key's answer is kept on the data volume (idempotency.py); 0
    # leaves Hermes' in-memory cache, which a gateway crash empties.
    idempotency_ttl: Seconds = Field(
        DEFAULT_IDEMPOTENCY_TTL, validation_alias="HERMES_RUNTIME_IDEMPOTENCY_TTL_SECONDS"
    )
    # The Unix socket the preStop hook (``agent pre-stop``) reaches the entrypoint on.
    control_socket: Path = Field(
        DEFAULT_CONTROL_SOCKET, validation_alias="HERMES_RUNTIME_CONTROL_SOCKET"
    )
    # Connections the front door holds while no gateway accepts; more get an immediate 503.
    front_door_max_held: int = Field(
        DEFAULT_FRONT_DOOR_MAX_HELD,
        validation_alias="HERMES_RUNTIME_FRONT_DOOR_MAX_HELD",
        ge=1,
        le=MAX_FRONT_DOOR_MAX_HELD,
    )
    # The data volume's reserve: below it /ready fails and new turns get a 503 (0: off).
    data_min_free_mib: int = Field(
        DEFAULT_DATA_MIN_FREE_MIB,
        validation_alias="HERMES_RUNTIME_DATA_MIN_FREE_MIB",
        ge=0,
        le=MAX_DATA_MIN_FREE_MIB,
    )
    # The API port's caps: connections at once, and from one address (0: no such cap).
    front_door_max_connections: int = Field(
        DEFAULT_FRONT_DOOR_MAX_CONNECTIONS,
        validation_alias="HERMES_RUNTIME_FRONT_DOOR_MAX_CONNECTIONS",
        ge=1,
        le=MAX_FRONT_DOOR_CONNECTIONS,
    )
    front_door_max_per_peer: int = Field(
        DEFAULT_FRONT_DOOR_MAX_PER_PEER,
        validation_alias="HERMES_RUNTIME_FRONT_DOOR_MAX_PER_PEER",
        ge=0,
        le=MAX_FRONT_DOOR_CONNECTIONS,
    )
    # Comma-separated CIDRs of the pod network: a successor's announced address must be in
    # one (empty: anywhere).
    relay_cidrs: Networks = Field((), validation_alias="HERMES_RUNTIME_RELAY_CIDRS")

    @classmethod
    def from_environ(cls, env: Mapping[str, str]) -> AgentSettings:
        """The settings ``env`` gives; an unset or blank variable means the field's default.

        A value that breaks its field's rule is a ``RuntimeFailure`` naming the variable and
        the value (what an operator fixes in the chart's values).
        """
        given = given_values(cls, env)
        given[DATA_DIR_ENV] = str(resolve_data_dir(env))
        try:
            return cls.model_validate(given)
        except ValidationError as exc:
            raise RuntimeFailure(_message(exc.errors()[0])) from None

    @property
    def http_limits(self) -> ServerLimits:
        """The metrics port's caps."""
        return ServerLimits(
            self.http_max_connections, self.http_max_per_peer, self.http_head_seconds
        )

    @property
    def front_door_limits(self) -> ServerLimits:
        """The API port's caps."""
        return ServerLimits(
            self.front_door_max_connections, self.front_door_max_per_peer, self.http_head_seconds
        )

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


def _message(error: ErrorDetails) -> str:
    """One line naming the variable and the value: what an operator fixes in the values."""
    name = ".".join(str(part) for part in error["loc"])
    reason = error["msg"].removeprefix("Value error, ")
    return f"{name}={error['input']!r} is refused: {reason}"
