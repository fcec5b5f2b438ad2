"""Where the Hermes data dir is: ``$HERMES_HOME``, else the image's ``/opt/data``.

Hermes itself reads ``HERMES_HOME``, and every process of the runtime (the entrypoint, each CLI
verb, the gateway's plugins) must find the same folder it does, so the rule is written once,
here. An empty or blank value counts as unset: a chart that renders ``HERMES_HOME: ""`` means
the image's default, not the working directory.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

DATA_DIR_ENV = "HERMES_HOME"
DEFAULT_DATA_DIR = Path("/opt/data")


def resolve_data_dir(env: Mapping[str, str]) -> Path:
    """The data dir ``env`` names (``$HERMES_HOME``, stripped), else ``DEFAULT_DATA_DIR``."""
    return Path(env.get(DATA_DIR_ENV, "").strip() or DEFAULT_DATA_DIR)
