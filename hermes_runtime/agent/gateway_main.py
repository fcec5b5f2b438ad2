"""The gateway process's ``__main__``: Hermes, with the durable idempotency cache installed.

``gateway_command()`` runs ``python -m hermes_runtime.agent.gateway_main hermes_cli.main
gateway run --replace``: the warm gateway (``zygote.py``) after "go", the supervisor on every
restart. So this runs only while the entrypoint holds the data dir lock. It arranges for
``idempotency.py`` to replace Hermes' in-memory ``Idempotency-Key`` cache when Hermes imports
its API server, then runs the Hermes module named by its first argument exactly as ``python
-m`` would (``sys.argv`` as Hermes expects it). Hermes' module stays on the command line
because Hermes recognises its gateway process by it (``gateway/status.py`` looks for
``hermes_cli.main`` followed by ``gateway run``).

Nothing here may stop the gateway: a setting that does not parse is logged and Hermes runs
with its own cache. Importing this module loads only the agent package's light modules
(the package's exports are lazy), so a gateway start pays no more than it did.
"""

from __future__ import annotations

import os
import runpy
import sys
from collections.abc import Sequence
from pathlib import Path

from hermes_runtime.agent.idempotency import install_on_import
from hermes_runtime.agent.settings import AgentSettings
from hermes_runtime.common.errors import RuntimeFailure
from hermes_runtime.common.groupaccess import share_new_sqlite3_databases
from hermes_runtime.common.logs import log_event
from hermes_runtime.compat import check_launch


def prepare_gateway() -> None:
    """Set up what must be in place before Hermes starts (the idempotency cache, new
    databases created group-writable).

    First, one log line if the installed Hermes is not a release hermes-runtime knows
    (``compat/launch.py``): read from its distribution's metadata, nothing of Hermes is
    imported before Hermes itself runs."""
    check_launch()
    share_new_sqlite3_databases()  # Hermes' and plugins' new databases, for replicate
    try:
        settings = AgentSettings.from_environ(os.environ)
    except RuntimeFailure as exc:
        log_event("agent.idempotency.not_installed", level="warning", reason=str(exc))
        return
    install_on_import(settings.state_dir, settings.idempotency_ttl)
    _append_plugin_packages(settings.data_dir)


def _append_plugin_packages(data_dir: Path) -> None:
    """Each linked plugin's installed packages go to the END of ``sys.path`` (never before
    it): a plugin can add modules, never replace one of Hermes' or ours
    (``plugins/syspath.py``)."""
    from hermes_runtime.plugins.syspath import append_plugin_packages

    added = append_plugin_packages(data_dir, sys.path)
    if added:
        log_event("agent.plugin_packages.on_path", paths=added)


def main(argv: Sequence[str]) -> None:
    """Run ``argv[0]`` (``hermes_cli.main``) as ``__main__`` with ``argv[1:]``."""
    if not argv:
        raise SystemExit("usage: python -m hermes_runtime.agent.gateway_main MODULE [ARGS...]")
    module, args = argv[0], list(argv[1:])
    prepare_gateway()
    sys.argv = [module, *args]
    runpy.run_module(module, run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main(sys.argv[1:])
