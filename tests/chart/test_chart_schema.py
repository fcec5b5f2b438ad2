"""values.schema.json refuses bad values, and helm's message names the field at fault."""

from __future__ import annotations

from typing import Any

import pytest
from chart_testlib import render, render_error

GOOD_PLUGIN = {"name": "weather", "repo": "https://git.example.com/weather.git"}

# case -> (values, the field path helm must name, a word of the reason)
BAD_VALUES: dict[str, tuple[dict[str, Any], str, str]] = {
    "plugin name with a slash": (
        {"plugins": [{**GOOD_PLUGIN, "name": "team/weather"}]},
        "/plugins/0/name",
        "pattern",
    ),
    "plugin name with dot-dot": (
        {"plugins": [GOOD_PLUGIN, {**GOOD_PLUGIN, "name": ".."}]},
        "/plugins/1/name",
        "pattern",
    ),
    "plugin name upper case": (
        {"plugins": [{**GOOD_PLUGIN, "name": "Weather"}]},
        "/plugins/0/name",
        "pattern",
    ),
    "plugin without repo": (
        {"plugins": [{"name": "weather"}]},
        "/plugins/0",
        "repo",
    ),
    "plugin subPath escaping upwards": (
        {"plugins": [{**GOOD_PLUGIN, "subPath": "src/../../etc"}]},
        "/plugins/0/subPath",
        "not",
    ),
    "plugin subPath absolute": (
        {"plugins": [{**GOOD_PLUGIN, "subPath": "/etc"}]},
        "/plugins/0/subPath",
        "pattern",
    ),
    "plugin ssh key without known hosts": (
        {"plugins": [{**GOOD_PLUGIN, "auth": {"sshKeySecret": "git-ssh"}}]},
        "/plugins/0/auth",
        "knownHosts",
    ),
    "plugin with both auth kinds": (
        {
            "plugins": [
                {
                    **GOOD_PLUGIN,
                    "auth": {"existingSecret": "a", "sshKeySecret": "b", "knownHosts": "h"},
                }
            ]
        },
        "/plugins/0/auth",
        "not",
    ),
    "plugin period not a duration": (
        {"plugins": [{**GOOD_PLUGIN, "period": "often"}]},
        "/plugins/0/period",
        "pattern",
    ),
    "boolean given as a string": (
        {"backup": {"enabled": "yes"}},
        "/backup/enabled",
        "boolean",
    ),
    "port given as a string": ({"apiServer": {"port": "8642"}}, "/apiServer/port", "integer"),
    "plugins given as a map": ({"plugins": {"weather": {}}}, "/plugins", "array"),
    "top-level typo": ({"persistance": {"size": "1Gi"}}, "persistance", "additional"),
    "nested typo": ({"backup": {"retension": {"keepLast": 3}}}, "retension", "additional"),
    "deep typo": ({"vault": {"refresher": {"enable": True}}}, "enable", "additional"),
    "unknown access mode": (
        {"persistence": {"accessModes": ["ReadWriteSometimes"]}},
        "/persistence/accessModes/0",
        "ReadWriteOnce",
    ),
    "unknown backup mode": ({"backup": {"mode": "rsync"}}, "/backup/mode", "cronjob"),
    "unknown target type": (
        {"backup": {"target": {"type": "ftp"}}},
        "/backup/target/type",
        "s3",
    ),
    "retention keeps nothing": (
        {"backup": {"retention": {"keepLast": 0}}},
        "/backup/retention/keepLast",
        "minimum",
    ),
    "exclude with a quote": (
        {"backup": {"excludes": ["it's"]}},
        "/backup/excludes/0",
        "pattern",
    ),
    "vault secret env not a name": (
        {"vault": {"secrets": [{"path": "secret/data/a", "key": "k", "env": "1BAD-NAME"}]}},
        "/vault/secrets/0/env",
        "pattern",
    ),
    "digest malformed": ({"image": {"digest": "latest"}}, "/image/digest", "pattern"),
    "sidecar mode unknown": ({"sidecarMode": "sometimes"}, "/sidecarMode", "native"),
    "lcm threshold above the engine's range": (
        {"lcm": {"thresholdPercent": 0.99}},
        "/lcm/thresholdPercent",
        "maximum",
    ),
    "lcm openai embeddings without a model": (
        {"lcm": {"embeddings": {"mode": "openai"}}},
        "/lcm/embeddings/model",
        "minLength",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD_VALUES))
def test_schema_refuses_and_names_the_field(case: str) -> None:
    values, field, reason = BAD_VALUES[case]
    error = render_error(values)
    assert "values don't meet the specifications of the schema" in error, error
    assert field in error, error
    assert reason in error, error


@pytest.mark.parametrize(
    "values",
    [
        {"backup": {"schedule": "@daily"}},
        {"backup": {"schedule": "*/15 1-5 * jan,feb mon-fri"}},
        {"persistence": {"size": "512Mi"}},
        {"persistence": {"size": "1.5Gi"}},
        {"plugins": [{**GOOD_PLUGIN, "name": "my_plugin-2", "subPath": "src/plugin"}]},
        {"plugins": [{**GOOD_PLUGIN, "period": "1m30s", "depth": 0}]},
    ],
    ids=["cron macro", "cron ranges", "Mi", "decimal Gi", "plugin name", "period"],
)
def test_schema_accepts_good_values(values: dict[str, Any]) -> None:
    assert render(values).deployment


# Cross-field rules the JSON schema cannot express: the templates fail with a message.
TEMPLATE_ERRORS: dict[str, tuple[dict[str, Any], str]] = {
    # The schema checks only the type of these; templates/_validate_rules.tpl says the fix.
    "cron with three fields": ({"backup": {"schedule": "* * *"}}, "backup.schedule"),
    "cron with words": ({"backup": {"schedule": "every day"}}, "backup.schedule"),
    "cron with six fields": ({"backup": {"schedule": "0 0 * * * *"}}, "backup.schedule"),
    "size not a quantity": ({"persistence": {"size": "lots"}}, "persistence.size"),
    "size with a bad unit": ({"persistence": {"size": "10GB"}}, "persistence.size"),
    "backup pvc size not a quantity": (
        {"backup": {"target": {"pvc": {"size": "big"}}}},
        "backup.target.pvc.size",
    ),
    "api key too short": ({"apiServer": {"key": "short"}}, "apiServer.key"),
    "cronjob on a ReadWriteOncePod volume": (
        {"persistence": {"accessModes": ["ReadWriteOncePod"]}},
        "backup.mode=sidecar",
    ),
    "cronjob with a ReadWriteOncePod backup volume": (
        {"backup": {"target": {"pvc": {"accessModes": ["ReadWriteOncePod"]}}}},
        "backup.target.pvc.accessModes",
    ),
    "cronjob without persistence": (
        {"persistence": {"enabled": False}},
        "persistence.enabled",
    ),
    "s3 target without bucket": (
        {"backup": {"target": {"type": "s3"}}},
        "backup.target.s3.bucket",
    ),
    "vault without address": (
        {"vault": {"enabled": True, "role": "r"}},
        "vault.address",
    ),
}


@pytest.mark.parametrize("case", sorted(TEMPLATE_ERRORS))
def test_template_refuses_inconsistent_values(case: str) -> None:
    values, field = TEMPLATE_ERRORS[case]
    error = render_error(values)
    assert field in error, error
