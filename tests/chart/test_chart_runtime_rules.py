"""The chart's values.schema.json and the runtime's settings models state each shared rule once.

A value the chart renders (a plugin name, an LCM setting, a Vault variable name) is checked
twice: by helm against values.schema.json, and by hermes-runtime when the pod starts. If the two
disagree, helm accepts what the pod then refuses (or the reverse): a release that installs and
never starts. These tests compare the constraints field by field, from the models' own JSON
schema, so a rule changed on one side fails here until the other side follows.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from chart_testlib import CHART, render, render_error
from pydantic import TypeAdapter

from hermes_runtime.agent.settings import AgentSettings
from hermes_runtime.lcm.config import LcmSection
from hermes_runtime.plugins import load_spec
from hermes_runtime.plugins.spec import NAME_PATTERN, SpecItem
from hermes_runtime.vault.envfile import ENV_NAME
from hermes_runtime.vault.spec import SecretSpec

SCHEMA = json.loads((CHART / "values.schema.json").read_text())
CONSTRAINTS = ("type", "pattern", "minimum", "maximum", "enum")

# values path in the chart -> the field of the runtime model it is rendered into
LCM_FIELDS = {
    ("thresholdPercent",): "threshold_percent",
    ("targetPercent",): "target_percent",
    ("freshTailMessages",): "fresh_tail_messages",
    ("commitIntervalMs",): "commit_interval_ms",
    ("embeddings", "mode"): "embeddings",
    ("embeddings", "baseUrl"): "embeddings_base_url",
    ("embeddings", "model"): "embeddings_model",
    ("embeddings", "dim"): "embeddings_dim",
}
# agent.* values rendered into the entrypoint's environment -> the field of AgentSettings
AGENT_FIELDS = {
    ("terminationGracePeriodSeconds",): "grace_seconds",
    ("preStopSeconds",): "prestop_seconds",
    ("handoverWaitSeconds",): "handover_seconds",
    ("lockTimeoutSeconds",): "lock_timeout",
    ("idempotencyTtlSeconds",): "idempotency_ttl",
    ("frontDoorMaxHeld",): "front_door_max_held",
    ("dataVolume", "minFreeMiB"): "data_min_free_mib",
}
PLUGIN_FIELDS = ("name", "subPath", "enabled", "maxSizeMiB")


def chart_property(*path: str) -> dict[str, Any]:
    node: dict[str, Any] = SCHEMA
    for part in path:
        node = node["items"] if part == "[]" else node["properties"][part]
    return node


def constraints(node: dict[str, Any]) -> dict[str, Any]:
    """The keywords both sides can state; a model's Literal is an enum of one type."""
    found = {key: node[key] for key in CONSTRAINTS if key in node}
    if "enum" in found:
        found.pop("type", None)
    return found


def model_property(schema: dict[str, Any], name: str) -> dict[str, Any]:
    return schema["properties"][name]


@pytest.mark.parametrize("field", PLUGIN_FIELDS)
def test_plugin_fields_have_the_same_rules(field: str) -> None:
    chart = constraints(chart_property("plugins", "[]", field))
    runtime = constraints(model_property(SpecItem.model_json_schema(), field))
    if field == "subPath":
        # The runtime's rules for a subPath are code (normalize_sub_path: no '..', no '.git',
        # no absolute path); the chart's pattern refuses a subset of those at helm time.
        chart.pop("pattern")
    assert chart == runtime


def test_plugin_name_rule_is_the_runtime_pattern() -> None:
    assert chart_property("plugins", "[]", "name")["pattern"] == NAME_PATTERN.pattern


@pytest.mark.parametrize(("values_path", "field"), LCM_FIELDS.items())
def test_lcm_fields_have_the_same_rules(values_path: tuple[str, ...], field: str) -> None:
    chart = constraints(chart_property("lcm", *values_path))
    runtime = constraints(model_property(LcmSection.model_json_schema(), field))
    assert chart == runtime


def bounds(node: dict[str, Any]) -> dict[str, Any]:
    return {key: node[key] for key in ("minimum", "maximum") if key in node}


@pytest.mark.parametrize(("values_path", "field"), AGENT_FIELDS.items())
def test_agent_fields_have_the_same_bounds(values_path: tuple[str, ...], field: str) -> None:
    """Bounds only: the chart takes whole seconds where the runtime also takes fractions."""
    chart = chart_property("agent", *values_path)
    runtime = model_property(AgentSettings.model_json_schema(by_alias=False), field)
    assert bounds(chart) == bounds(runtime)
    assert chart["type"] == "integer" and runtime["type"] in ("integer", "number")


def test_agent_fields_are_the_variables_the_chart_sets() -> None:
    env = {e["name"] for e in render({}).container("agent")["env"]}
    for field in AGENT_FIELDS.values():
        assert AgentSettings.model_fields[field].validation_alias in env


def test_vault_variable_names_have_the_same_rule() -> None:
    chart = constraints(chart_property("vault", "secrets", "[]", "env"))
    runtime = constraints(model_property(TypeAdapter(SecretSpec).json_schema(), "env"))
    assert chart == runtime == {"type": "string", "pattern": ENV_NAME.pattern}


def longest_name(length: int) -> str:
    return ("p" + "-plugin" * 10)[:length]


@pytest.mark.parametrize("mode", ["native", "legacy"])
def test_the_name_limit_is_where_kubernetes_puts_it(tmp_path: Path, mode: str) -> None:
    """49 characters: every git-sync container name fits Kubernetes' 63 (legacy mode's
    `git-sync-<name>-init` exactly), and the pod links the plugin. 50: helm and the
    runtime both refuse it, naming the field."""
    name = longest_name(49)
    plugin = {"name": name, "repo": "https://git.example.com/p.git"}
    manifest = render({"plugins": [plugin], "sidecarMode": mode})  # kubernetes-validate too
    pod = manifest.agent_pod
    containers = [c["name"] for c in pod["containers"] + pod.get("initContainers", [])]
    git_sync = [c for c in containers if c.startswith("git-sync-")]
    assert git_sync and max(len(c) for c in git_sync) == (63 if mode == "legacy" else 58)
    spec_path = tmp_path / "plugins.yaml"
    spec_path.write_text(manifest.configmap_file("plugins.yaml"))
    assert [(e.name, e.error) for e in load_spec(spec_path)] == [(name, None)]

    too_long = longest_name(50)
    assert "/plugins/0/name" in render_error({"plugins": [{**plugin, "name": too_long}]})
    spec_path.write_text(yaml.safe_dump({"plugins": [{"name": too_long}]}))
    (entry,) = load_spec(spec_path)
    assert entry.error is not None and "field 'name' must match" in entry.error
    assert repr(too_long) in entry.error
