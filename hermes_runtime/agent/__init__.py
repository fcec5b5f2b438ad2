"""The agent image's entrypoint: prepare the data dir, link plugins, supervise the gateway.

Public surface:

- ``AgentSettings.from_environ(env)``: the settings the chart passes as env vars.
- ``prepare(settings) -> PrepareReport``: seed ``config.yaml``/``SOUL.md`` without overwriting
  user edits, link the plugins (``agent prepare``, e.g. before a restore check; ``agent run``
  does it itself).
- ``run_agent(settings) -> int``: wait for the data volume's lock (the gateway process already
  importing meanwhile, ``zygote.py``), ``prepare``, then the Hermes gateway in the foreground
  with its API server, everything on one event loop: crashes restarted in place, graceful
  restarts on plugin/secret changes, metrics; the front door (``frontdoor.py``) owns the API
  port and holds clients while the gateway is replaced; the stop and hand-over to a warm
  successor pod (the preStop hook, ``/ready``'s verdict, relaying, lingering) is one object in
  one file, ``handover.py``.
- ``Supervisor``: the child-process supervisor, a coroutine (``request_restart(reason)``: the
  one restart path, also used for plugin and secret changes).
- ``GatewayRestarter``: the same restart for ``plugins watch`` outside the entrypoint (both
  signal and wait through ``restart.signal_and_wait``).
- ``seed_config`` / ``seed_soul``: the three-way seeding on its own.
- ``ask_entrypoint(socket, PRE_STOP, timeout)``: the preStop hook's call (``agent pre-stop``)
  to a running entrypoint over its control socket (``control.py``, ``hook.py``); ``None``
  when none listens. Standard library only: the hook is a fresh interpreter on the stop's
  critical path.
- ``gateway_main``: the gateway process's ``__main__``; it installs ``idempotency.py``'s
  durable ``Idempotency-Key`` cache into Hermes' API server, then runs Hermes.

The exports are imported on first use (``__getattr__``): the gateway process imports
``hermes_runtime.agent.gateway_main`` on every start, and must not pay for the entrypoint's
modules (Vault client, Prometheus, plugins, backup) on the hand-over's critical path.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from hermes_runtime.agent.hook import ANSWER_MARGIN_SECONDS, PRE_STOP, ask_entrypoint
    from hermes_runtime.agent.metrics import AgentMetrics
    from hermes_runtime.agent.restart import GATEWAY_RESTART_EXIT_CODE, GatewayRestarter
    from hermes_runtime.agent.runner import PrepareReport, prepare, run_agent
    from hermes_runtime.agent.seed import SeedResult, seed_config, seed_soul
    from hermes_runtime.agent.settings import AgentSettings
    from hermes_runtime.agent.supervisor import Supervisor

_EXPORTS = {
    "ANSWER_MARGIN_SECONDS": "hermes_runtime.agent.hook",
    "PRE_STOP": "hermes_runtime.agent.hook",
    "ask_entrypoint": "hermes_runtime.agent.hook",
    "GATEWAY_RESTART_EXIT_CODE": "hermes_runtime.agent.restart",
    "AgentMetrics": "hermes_runtime.agent.metrics",
    "AgentSettings": "hermes_runtime.agent.settings",
    "GatewayRestarter": "hermes_runtime.agent.restart",
    "PrepareReport": "hermes_runtime.agent.runner",
    "SeedResult": "hermes_runtime.agent.seed",
    "Supervisor": "hermes_runtime.agent.supervisor",
    "prepare": "hermes_runtime.agent.runner",
    "run_agent": "hermes_runtime.agent.runner",
    "seed_config": "hermes_runtime.agent.seed",
    "seed_soul": "hermes_runtime.agent.seed",
}

__all__ = [
    "ANSWER_MARGIN_SECONDS",
    "GATEWAY_RESTART_EXIT_CODE",
    "PRE_STOP",
    "AgentMetrics",
    "AgentSettings",
    "GatewayRestarter",
    "PrepareReport",
    "SeedResult",
    "Supervisor",
    "ask_entrypoint",
    "prepare",
    "run_agent",
    "seed_config",
    "seed_soul",
]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
