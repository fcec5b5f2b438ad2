"""Hermes' home folder as Hermes itself resolves it, for code that runs in Hermes' process.

The runtime's own processes find the data dir with ``common.datadir.resolve_data_dir``. Code
loaded by Hermes (the LCM plugin) must read the folder Hermes reads, which Hermes decides
(``hermes_constants.get_hermes_home``: a per-context override, a profile, ``HERMES_HOME``, its
platform default); a second rule here could point the plugin at another folder than its host.
Degraded when that function is missing: the runtime's own rule, with one log line (the
caller passes the folder that rule gives, from its process's settings).
"""

from __future__ import annotations

from pathlib import Path

from hermes_runtime.common.logs import log_event


def hermes_home(data_dir: Path) -> Path:
    """The folder Hermes, in this process, reads its config and state from; ``data_dir`` (the
    runtime's rule) where Hermes cannot say."""
    try:
        from hermes_constants import get_hermes_home
    except ImportError:
        log_event(
            "hermes.compat.degraded",
            level="warning",
            internal="hermes_constants.get_hermes_home",
            effect="the plugin reads the data dir by the runtime's rule ($HERMES_HOME, else "
            "/opt/data), which may differ from Hermes' own",
        )
        return data_dir
    return Path(get_hermes_home())
