"""The LCM plugin's settings in Hermes' gateway process: every environment variable it takes,
with its default and rule, in one model (``PluginHostSettings``).

Why one model: the plugin runs inside a process the runtime does not start by itself (Hermes
loads it), so what it takes from the environment is read once, where Hermes registers the
plugin, and handed down as values; nothing below reads a variable of its own. The rules:

- ``HERMES_RUNTIME_LCM_METRICS_PORT``: the port LCM's ``/metrics`` is served on; unset or
  blank, no server. A value that is not a TCP port is logged (``lcm.metrics.unavailable``)
  and means no server: metrics must never stop the agent.
- the small HTTP ports' caps (``HttpLimitsEnv``, ``common/boundedhttp.py``), the same
  variables and bounds as the entrypoint's metrics port; a bad value is logged
  (``http.limits.refused``) and every cap keeps its default (the entrypoint refuses the
  same value, so this only guards a gateway started by hand).
- the e5 graph's cache (``ModelCacheEnv``, ``common/modelcache.py``).
- the data dir by the runtime's rule (``common/datadir.py``), which the plugin uses only
  where Hermes cannot say its own (``compat/home.py``).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from pydantic import ConfigDict, Field, ValidationError

from hermes_runtime.common.boundedhttp import HttpLimitsEnv
from hermes_runtime.common.datadir import DATA_DIR_ENV, DEFAULT_DATA_DIR, resolve_data_dir
from hermes_runtime.common.envsettings import given_values, variables
from hermes_runtime.common.logs import log_event
from hermes_runtime.common.modelcache import ModelCacheEnv

METRICS_PORT_ENV = "HERMES_RUNTIME_LCM_METRICS_PORT"
HTTP_LIMIT_VARIABLES = frozenset(variables(HttpLimitsEnv))


class PluginHostSettings(HttpLimitsEnv, ModelCacheEnv):
    """What the gateway's LCM plugin takes from the environment (see the module's rules)."""

    model_config = ConfigDict(
        extra="ignore",
        allow_inf_nan=False,
        frozen=True,
        validate_by_name=True,
        validate_by_alias=True,
    )

    data_dir: Path = Field(DEFAULT_DATA_DIR, validation_alias=DATA_DIR_ENV)
    metrics_port: int | None = Field(None, ge=1, le=65535, validation_alias=METRICS_PORT_ENV)

    @classmethod
    def from_environ(cls, env: Mapping[str, str]) -> PluginHostSettings:
        """The settings ``env`` gives; a bad value is logged and its default kept, never
        raised: the plugin must not stop the gateway that loads it."""
        given = given_values(cls, env)
        given[DATA_DIR_ENV] = str(resolve_data_dir(env))
        while True:
            try:
                return cls.model_validate(given)
            except ValidationError as exc:
                _drop_refused(given, env, exc)


def _drop_refused(given: dict[str, str], env: Mapping[str, str], exc: ValidationError) -> None:
    """Log the first refused variable of ``exc`` and take its group out of ``given``."""
    error = exc.errors()[0]
    variable = str(error["loc"][0]) if error["loc"] else ""
    if variable == METRICS_PORT_ENV:
        problem = f"{METRICS_PORT_ENV}: not a TCP port"
        log_event("lcm.metrics.unavailable", port=env.get(METRICS_PORT_ENV), error=problem)
        del given[METRICS_PORT_ENV]
    elif variable in HTTP_LIMIT_VARIABLES:
        log_event("http.limits.refused", level="warning", error=str(error["msg"]))
        for name in HTTP_LIMIT_VARIABLES:
            given.pop(name, None)
    else:  # a path field takes any text: no other variable can be refused
        raise exc
