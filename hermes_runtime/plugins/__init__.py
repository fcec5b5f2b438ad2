"""Plugin symlink bootstrapper: git-synced repositories become Hermes plugins.

Public surface (the agent entrypoint imports it):

- ``link_plugins(data_dir, spec_path, wait_seconds=0) -> LinkReport``: converge once.
- ``watch_links(data_dir, spec_path, on_change, stop, interval=1.0, baseline=None)``:
  re-converge on changes; ``on_change(report)`` runs when Hermes must reload.
- ``IndexSource.from_options(url, ca_file)``: the package index plugin packages come from,
  its CA bundle checked readable.

Restarting the gateway when the links change is the agent's job (``hermes_runtime.agent``:
``Supervisor.request_restart``, or ``GatewayRestarter`` outside the entrypoint).

Each name loads its module on first use (``common/lazyexports.py``): every gateway start
imports ``plugins.syspath`` (a plugin's packages onto ``sys.path``), which must not pay for
the linker, the spec model and the watcher it does not use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from hermes_runtime.common.lazyexports import lazy_exports

if TYPE_CHECKING:
    from hermes_runtime.plugins.indexsource import IndexSource
    from hermes_runtime.plugins.link import LinkReport, PluginResult, link_plugins
    from hermes_runtime.plugins.spec import SpecEntry, load_spec
    from hermes_runtime.plugins.watch import watch_links

_HOMES = {
    "IndexSource": "indexsource",
    "LinkReport": "link",
    "PluginResult": "link",
    "link_plugins": "link",
    "SpecEntry": "spec",
    "load_spec": "spec",
    "watch_links": "watch",
}

__all__ = [
    "IndexSource",
    "LinkReport",
    "PluginResult",
    "SpecEntry",
    "link_plugins",
    "load_spec",
    "watch_links",
]


__getattr__ = lazy_exports(__name__, _HOMES)
