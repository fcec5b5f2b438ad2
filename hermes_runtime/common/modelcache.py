"""Where the built e5 graph is cached: ``$HERMES_RUNTIME_MODEL_CACHE``, else
``$XDG_CACHE_HOME/hermes-runtime``, else ``~/.cache/hermes-runtime``.

The rule is written once, here, as fields a process's settings model includes
(``ModelCacheEnv``), so every process that embeds finds the same folder: the gateway's LCM
plugin and the CLI through their settings (``lcm/host/hostsettings.py``,
``cli/settings.py``), which hand the folder to the embedder; a process without a settings
model (an image's build step, a benchmark) through ``model_cache_dir``. An unset or blank
variable means the next choice.

An image may build the graph ahead into a read-only folder and point the variable there. In
the agent image ``HOME`` is ``/opt/data/home``: without the image's cache the file would sit
in the data volume, in a ``.cache/`` folder backups leave out (it is rebuilt on demand).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from hermes_runtime.common.envsettings import given_values

MODEL_CACHE_ENV = "HERMES_RUNTIME_MODEL_CACHE"
XDG_CACHE_HOME_ENV = "XDG_CACHE_HOME"


class ModelCacheEnv(BaseModel):
    """The variables that choose the model cache, and the folder they choose."""

    model_config = ConfigDict(frozen=True)

    model_cache: Path | None = Field(None, validation_alias=MODEL_CACHE_ENV)
    xdg_cache_home: Path | None = Field(None, validation_alias=XDG_CACHE_HOME_ENV)

    @property
    def model_cache_dir(self) -> Path:
        """The folder the variables name (see the module's rule)."""
        if self.model_cache is not None:
            return self.model_cache
        return (self.xdg_cache_home or Path.home() / ".cache") / "hermes-runtime"


def model_cache_dir(env: Mapping[str, str]) -> Path:
    """The model cache ``env`` names, for a process whose settings model does not hold it."""
    return ModelCacheEnv.model_validate(given_values(ModelCacheEnv, env)).model_cache_dir
