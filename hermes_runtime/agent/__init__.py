"""The agent image's entrypoint: prepare the data dir, link plugins, supervise the gateway.

Public surface:

- ``AgentSettings.from_env()``: the settings the chart passes as env vars.
- ``prepare(settings) -> PrepareReport``: seed ``config.yaml``/``SOUL.md`` without overwriting
  user edits, link the plugins (``agent prepare``, e.g. before a restore check; ``agent run``
  does it itself).
- ``run_agent(settings) -> int``: wait for the data volume's lock (the gateway process already
  importing meanwhile, ``zygote.py``), ``prepare``, then the Hermes gateway in the foreground
  with its API server: signals forwarded, hand-over on stop (``/ready``, ``/pre-stop`` waiting
  for a warm successor, drain), crashes restarted in place, graceful restarts on
  plugin/secret changes, metrics; the front door (``frontdoor.py``) owns the API port and
  holds clients while the gateway is replaced.
- ``Supervisor``: the child-process supervisor (``request_restart(reason)``: the one restart
  path, also used for plugin and secret changes).
- ``GatewayRestarter``: the same restart for ``plugins watch`` outside the entrypoint.
- ``seed_config`` / ``seed_soul``: the three-way seeding on its own.
"""

from hermes_runtime.agent.metrics import AgentMetrics
from hermes_runtime.agent.restart import GATEWAY_RESTART_EXIT_CODE, GatewayRestarter
from hermes_runtime.agent.runner import PrepareReport, prepare, run_agent
from hermes_runtime.agent.seed import SeedResult, seed_config, seed_soul
from hermes_runtime.agent.settings import AgentSettings
from hermes_runtime.agent.supervisor import Supervisor

__all__ = [
    "GATEWAY_RESTART_EXIT_CODE",
    "AgentMetrics",
    "AgentSettings",
    "GatewayRestarter",
    "PrepareReport",
    "SeedResult",
    "Supervisor",
    "prepare",
    "run_agent",
    "seed_config",
    "seed_soul",
]
