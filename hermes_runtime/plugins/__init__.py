"""Plugin symlink bootstrapper: git-synced repositories become Hermes plugins.

Public surface (the agent entrypoint imports it):

- ``link_plugins(data_dir, spec_path, wait_seconds=0) -> LinkReport``: converge once.
- ``watch(data_dir, spec_path, on_change, stop, interval=1.0, baseline=None)``:
  re-converge on changes; ``on_change(report)`` runs when Hermes must reload.
- ``GatewayRestarter(data_dir, pid=...)``: an ``on_change`` that waits for the
  gateway to be idle, then asks it to restart gracefully (SIGUSR1 -> exit 75).
"""

from hermes_runtime.plugins.link import LinkReport, PluginResult, link_plugins
from hermes_runtime.plugins.reload import (
    RESTART_EXIT_CODE,
    GatewayRestarter,
    gateway_pid,
    request_gateway_restart,
)
from hermes_runtime.plugins.spec import SpecEntry, load_spec
from hermes_runtime.plugins.watch import watch

__all__ = [
    "RESTART_EXIT_CODE",
    "GatewayRestarter",
    "LinkReport",
    "PluginResult",
    "SpecEntry",
    "gateway_pid",
    "link_plugins",
    "load_spec",
    "request_gateway_restart",
    "watch",
]
