"""Plugin symlink bootstrapper: git-synced repositories become Hermes plugins.

Public surface (the agent entrypoint imports it):

- ``link_plugins(data_dir, spec_path, wait_seconds=0) -> LinkReport``: converge once.
- ``watch(data_dir, spec_path, on_change, stop, interval=1.0, baseline=None)``:
  re-converge on changes; ``on_change(report)`` runs when Hermes must reload.

Restarting the gateway when the links change is the agent's job (``hermes_runtime.agent``:
``Supervisor.request_restart``, or ``GatewayRestarter`` outside the entrypoint).
"""

from hermes_runtime.plugins.link import LinkReport, PluginResult, link_plugins
from hermes_runtime.plugins.spec import SpecEntry, load_spec
from hermes_runtime.plugins.watch import watch

__all__ = [
    "LinkReport",
    "PluginResult",
    "SpecEntry",
    "link_plugins",
    "load_spec",
    "watch",
]
