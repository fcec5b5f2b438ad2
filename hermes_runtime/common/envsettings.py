"""How a process's settings model takes its values from an environment: one rule for all.

A field's environment variable is its ``validation_alias``; an unset or blank variable means
the field's default (a chart renders ``""`` for a value it leaves out), and a value is taken
stripped. The entrypoint's ``AgentSettings`` and the CLI's ``CliSettings`` read alike so.
"""

from __future__ import annotations

from collections.abc import Mapping

from pydantic import BaseModel


def variables(model: type[BaseModel]) -> dict[str, str]:
    """Each environment variable ``model`` reads, with the field it sets."""
    return {
        str(info.validation_alias): name
        for name, info in model.model_fields.items()
        if isinstance(info.validation_alias, str)
    }


def given_values(model: type[BaseModel], env: Mapping[str, str]) -> dict[str, str]:
    """The values ``env`` gives ``model``'s variables: stripped, blank ones left out."""
    return {name: env[name].strip() for name in variables(model) if env.get(name, "").strip()}
