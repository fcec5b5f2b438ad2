"""The agent image's entrypoint: prepare the data dir, link plugins, supervise the gateway.

Public surface:

- ``AgentSettings.from_env()``: the settings the chart passes as env vars.
- ``prepare(settings) -> PrepareReport``: seed ``config.yaml``/``SOUL.md`` without overwriting
  user edits, link the plugins (what the ``agent prepare`` init container runs).
- ``run_agent(settings) -> int``: ``prepare``, then the Hermes gateway in the foreground with
  its API server, signals forwarded, graceful stop, restarts on plugin/secret changes, metrics.
- ``Supervisor``: the child-process supervisor (``request_restart(reason)``).
- ``seed_config`` / ``seed_soul``: the three-way seeding on its own.
"""

from hermes_runtime.agent.metrics import AgentMetrics
from hermes_runtime.agent.runner import PrepareReport, prepare, run_agent
from hermes_runtime.agent.seed import SeedResult, seed_config, seed_soul
from hermes_runtime.agent.settings import AgentSettings
from hermes_runtime.agent.supervisor import GATEWAY_RESTART_EXIT_CODE, Supervisor

__all__ = [
    "GATEWAY_RESTART_EXIT_CODE",
    "AgentMetrics",
    "AgentSettings",
    "PrepareReport",
    "SeedResult",
    "Supervisor",
    "prepare",
    "run_agent",
    "seed_config",
    "seed_soul",
]
