"""The chart refuses what it would not do, naming the field and the fix.

Each case rendered with exit 0 before: a typo under `global`, a secret given twice (a Secret
and Vault, of which only Vault's reaches the container), a request above its limit, a
schedule Kubernetes cannot run, a storage class that missed a claim. And where the schema
answered with a regular expression (`6GB`, a four-field cron, a short API key), the message
a person reads now says what to write.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import pytest
from chart_testlib import CHART, FULLNAME, Manifest, pod_specs, render, render_error

VAULT_BASE = {"enabled": True, "address": "https://vault:8200", "role": "agent"}
S3 = {"type": "s3", "s3": {"bucket": "bkt"}}


def error_line(error: str, field: str) -> str:
    """The line of validate.yaml's report that starts with `field`."""
    assert "values that cannot work" in error, error
    line = next((ln for ln in error.splitlines() if ln.startswith(f"- {field}")), None)
    assert line, f"no error line starts with {field!r}:\n{error}"
    return line


def assert_readable(line: str) -> None:
    """No regular expression leaks into a message a person reads."""
    for leak in ("pattern", "^", "$", "[0-9]", "\\"):
        assert leak not in line, f"{leak!r} in {line}"


def vault(*secrets: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"vault": {**VAULT_BASE, "secrets": list(secrets), **extra}}


def secret(env: str, **extra: Any) -> dict[str, Any]:
    return {"path": "secret/data/hermes", "key": env.lower(), "env": env, **extra}


# --- global is closed ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("values", "typo"),
    [
        ({"imageRegistery": "mirror.corp"}, "imageRegistery"),
        ({"storageclass": "fast"}, "storageclass"),
        ({"compatibility": {"openShift": {"adaptSecurityContext": "force"}}}, "openShift"),
        ({"compatibility": {"openshift": {"adaptSecurityContexts": "force"}}}, "adaptSecurity"),
    ],
)
def test_a_typo_under_global_is_refused(values: dict[str, Any], typo: str) -> None:
    error = render_error({"global": values})
    assert "values don't meet the specifications of the schema" in error, error
    assert "/global" in error and typo in error and "not allowed" in error, error


def test_every_global_key_the_templates_read_is_accepted() -> None:
    manifest = render(
        {
            "global": {
                "imageRegistry": "mirror.corp:5000",
                "imagePullSecrets": ["shared"],
                "defaultStorageClass": "standard",
                "compatibility": {"openshift": {"adaptSecurityContext": "disabled"}},
            }
        }
    )
    assert manifest.container("agent")["image"].startswith("mirror.corp:5000/")
    assert manifest.agent_pod["imagePullSecrets"] == [{"name": "shared"}]
    assert set(claim_classes(manifest).values()) == {"standard"}
    # storageClass, Bitnami's older name, wins over defaultStorageClass.
    both = render({"global": {"storageClass": "fast", "defaultStorageClass": "standard"}})
    assert set(claim_classes(both).values()) == {"fast"}


def global_keys_read() -> set[str]:
    """The keys the templates read under `global`: the names after `global }}` on its lines."""
    keys: set[str] = set()
    for path in (CHART / "templates").rglob("*"):
        if path.suffix not in (".yaml", ".tpl"):
            continue
        for line in path.read_text(encoding="utf-8").splitlines():
            if "global }}" in line:
                keys |= set(re.findall(r"\.([A-Za-z]+)", line.split("global }}", 1)[1]))
    return keys


def schema_keys(node: dict[str, Any]) -> set[str]:
    keys: set[str] = set()
    for key, child in node.get("properties", {}).items():
        keys |= {key, *schema_keys(child)}
    return keys


def test_the_schema_knows_every_global_key_the_templates_read() -> None:
    schema = json.loads((CHART / "values.schema.json").read_text(encoding="utf-8"))
    read = global_keys_read()
    assert {"imageRegistry", "storageClass", "defaultStorageClass", "adaptSecurityContext"} <= read
    assert schema_keys(schema["properties"]["global"]) == read


# --- one source per secret --------------------------------------------------------------

SECRET_TWICE: dict[str, tuple[dict[str, Any], str, str]] = {
    "S3 Secret and Vault AWS keys": (
        {
            "backup": {"target": {**S3, "s3": {"bucket": "bkt", "existingSecret": "s3-keys"}}},
            **vault(secret("AWS_ACCESS_KEY_ID"), secret("AWS_SECRET_ACCESS_KEY"), backupRole="b"),
        },
        "backup.target.s3.existingSecret",
        "vault.secrets[0].env (AWS_ACCESS_KEY_ID)",
    ),
    "LLM Secret and Vault LLM_API_KEY": (
        {"llm": {"existingSecret": "llm-key"}, **vault(secret("LLM_API_KEY"))},
        "llm.existingSecret",
        "vault.secrets[0].env (LLM_API_KEY)",
    ),
    "restic Secret and Vault RESTIC_PASSWORD": (
        {
            "backup": {"repository": {"existingSecret": "restic"}},
            **vault(secret("RESTIC_PASSWORD"), backupRole="b"),
        },
        "backup.repository.existingSecret",
        "vault.secrets[0].env (RESTIC_PASSWORD)",
    ),
    "API key Secret and Vault API_SERVER_KEY": (
        {"apiServer": {"existingSecret": "api"}, **vault(secret("API_SERVER_KEY"))},
        "apiServer.existingSecret",
        "vault.secrets[0].env (API_SERVER_KEY)",
    ),
    "API key in values and Vault API_SERVER_KEY": (
        {"apiServer": {"key": "0123456789abcdef0"}, **vault(secret("API_SERVER_KEY"))},
        "apiServer.key",
        "vault.secrets[0].env (API_SERVER_KEY)",
    ),
    "restic Secret and fromVault": (
        {"backup": {"repository": {"existingSecret": "restic", "fromVault": True}}},
        "backup.repository.existingSecret",
        "backup.repository.fromVault",
    ),
}


@pytest.mark.parametrize("case", sorted(SECRET_TWICE))
def test_a_secret_given_twice_is_refused_naming_both(case: str) -> None:
    values, field, other = SECRET_TWICE[case]
    line = error_line(render_error(values), field)
    assert other in line, line
    assert "keep one source" in line, line


def test_vault_aws_keys_for_the_agent_alone_leave_the_s3_secret_alone() -> None:
    """The agent may hold AWS keys of its own (a tool's bucket): not the backup's."""
    values = {
        "backup": {"target": {**S3, "s3": {"bucket": "bkt", "existingSecret": "s3-keys"}}},
        **vault(secret("AWS_ACCESS_KEY_ID", **{"for": ["agent"]})),
    }
    assert render(values).deployment


def test_each_source_alone_renders() -> None:
    assert render({"llm": {"existingSecret": "llm-key"}, **vault(secret("OTHER_TOKEN"))})
    assert render(vault(secret("LLM_API_KEY"), secret("API_SERVER_KEY")))


# --- requests within limits --------------------------------------------------------------


def resources_paths(node: Any, path: tuple[str, ...] = ()) -> Iterator[str]:
    """Every value of the schema that is a container's resources block."""
    if not isinstance(node, dict):
        return
    if node.get("$ref") == "#/$defs/resources":
        yield ".".join(path)
    for key, child in node.get("properties", {}).items():
        yield from resources_paths(child, (*path, key))


RESOURCES = sorted(
    resources_paths(json.loads((CHART / "values.schema.json").read_text(encoding="utf-8")))
)


def nested(path: str, value: Any) -> dict[str, Any]:
    out: dict[str, Any] = value
    for key in reversed(path.split(".")):
        out = {key: out}
    return out


def test_every_container_has_a_resources_value() -> None:
    assert len(RESOURCES) >= 8, RESOURCES
    assert {"agent.resources", "gitSync.resources", "backup.resources"} <= set(RESOURCES)


@pytest.mark.parametrize("path", RESOURCES)
def test_a_memory_request_above_its_limit_is_refused(path: str) -> None:
    block = {"requests": {"memory": "4Gi"}, "limits": {"memory": "1Gi"}}
    line = error_line(render_error(nested(path, block)), f"{path}.requests.memory")
    assert f"{path}.limits.memory" in line and "1Gi" in line, line
    assert "lower the request or raise the limit" in line, line


@pytest.mark.parametrize(
    ("requests", "limits"),
    [
        ({"cpu": "2"}, {"cpu": "1500m"}),
        ({"cpu": 0.6}, {"cpu": "500m"}),
        ({"memory": "1e9"}, {"memory": "900M"}),
    ],
)
def test_requests_above_limits_in_any_unit_are_refused(
    requests: dict[str, Any], limits: dict[str, Any]
) -> None:
    error = render_error({"agent": {"resources": {"requests": requests, "limits": limits}}})
    name = next(iter(requests))
    error_line(error, f"agent.resources.requests.{name}")


@pytest.mark.parametrize(
    ("requests", "limits"),
    [
        ({"cpu": "1", "memory": "1Gi"}, {"cpu": "1000m", "memory": "1024Mi"}),
        ({"cpu": "250m", "memory": "512Mi"}, {"memory": "2Gi"}),
        ({"cpu": 0.5}, {"cpu": "0.5"}),
    ],
    ids=["equal in other units", "cpu without a limit", "number and text"],
)
def test_requests_within_limits_render(requests: dict[str, Any], limits: dict[str, Any]) -> None:
    resources = {"requests": requests, "limits": limits}
    assert render({"agent": {"resources": resources}}).container("agent")["resources"]


# --- every schedule alike ------------------------------------------------------------------

SCHEDULE_FIELDS = {
    "backup.schedule": lambda s: {"backup": {"schedule": s}},
    "backup.verify.schedule": lambda s: {"backup": {"verify": {"schedule": s}}},
}
CRONJOBS = {"backup.schedule": f"{FULLNAME}-backup", "backup.verify.schedule": f"{FULLNAME}-verify"}


@pytest.mark.parametrize("field", sorted(SCHEDULE_FIELDS))
@pytest.mark.parametrize(
    ("schedule", "says"),
    [
        ("0 25 * * 0", "25 is out of range 0-23"),
        ("0 4 * * sunday", '"sunday" is not a number'),
        ("@weakly", "@weekly"),
        ("@every 1h", "@daily"),
        ("0 3 * *", "has 4 fields; write five"),
        ("0 0 * * * *", "has 6 fields; write five"),
        ("every day", "has 2 fields"),
        ("H 3 H * *", "H (a number from the release's hash) stands only"),
    ],
)
def test_a_bad_schedule_is_refused_alike(field: str, schedule: str, says: str) -> None:
    error = render_error(SCHEDULE_FIELDS[field](schedule))
    assert "does not match pattern" not in error, error
    line = error_line(error, field)
    assert says in line, line


@pytest.mark.parametrize("field", sorted(SCHEDULE_FIELDS))
@pytest.mark.parametrize(
    "schedule",
    [
        "@weekly",
        "@daily",
        "@hourly",
        "@monthly",
        "@yearly",
        "@annually",
        "@midnight",
        "0 4 * * sun",
    ],
)
def test_every_schedule_kubernetes_reads_renders(field: str, schedule: str) -> None:
    cronjob = render(SCHEDULE_FIELDS[field](schedule)).one("CronJob", CRONJOBS[field])
    assert cronjob["spec"]["schedule"] == schedule


@pytest.mark.parametrize("field", sorted(SCHEDULE_FIELDS))
def test_h_still_spreads_the_schedule(field: str) -> None:
    schedule = render(SCHEDULE_FIELDS[field]("H 4 * * H")).one("CronJob", CRONJOBS[field])
    minute, hour, _, _, weekday = schedule["spec"]["schedule"].split()
    assert 0 <= int(minute) <= 59 and hour == "4" and 0 <= int(weekday) <= 6


def test_a_four_field_cron_gets_the_friendly_message() -> None:
    line = error_line(render_error({"backup": {"schedule": "0 3 * *"}}), "backup.schedule")
    assert "minute hour day-of-month month day-of-week" in line and "17 3 * * *" in line, line


# --- messages instead of regular expressions ---------------------------------------------

SIZES = {
    "persistence.size": lambda v: {"persistence": {"size": v}},
    "backup.target.pvc.size": lambda v: {"backup": {"target": {"pvc": {"size": v}}}},
    "backup.scratch.size": lambda v: {"backup": {"scratch": {"size": v}}},
    "agent.tmpSizeLimit": lambda v: {"agent": {"tmpSizeLimit": v}},
}


@pytest.mark.parametrize("field", sorted(SIZES))
def test_a_size_written_like_a_disk_label_gets_both_spellings(field: str) -> None:
    line = error_line(render_error(SIZES[field]("6GB")), field)
    assert "write 6Gi" in line and "or 6G " in line, line
    assert len(line) < 200, line
    assert_readable(line)


@pytest.mark.parametrize("field", sorted(SIZES))
def test_a_size_that_is_no_quantity_gets_examples(field: str) -> None:
    line = error_line(render_error(SIZES[field]("lots")), field)
    assert "10Gi" in line, line
    assert_readable(line)


@pytest.mark.parametrize(
    ("resources", "field", "says"),
    [
        ({"limits": {"memory": "2GB"}}, "limits.memory", "write 2Gi"),
        ({"limits": {"memory": "128 Mi"}}, "limits.memory", "write 128Mi"),
        ({"requests": {"cpu": "250mm"}}, "requests.cpu", "250m or 0.5 for CPU"),
        ({"requests": {"cpu": "-1"}}, "requests.cpu", "250m or 0.5 for CPU"),
        ({"requests": {"cpu": "500 m"}}, "requests.cpu", "250m or 0.5 for CPU"),
    ],
)
def test_a_resource_quantity_gets_a_readable_message(
    resources: dict[str, Any], field: str, says: str
) -> None:
    line = error_line(
        render_error({"gitSync": {"resources": resources}}), f"gitSync.resources.{field}"
    )
    assert says in line, line
    assert_readable(line)


def test_a_short_api_key_is_refused_without_printing_it() -> None:
    key = "tooshort-7"
    error = render_error({"apiServer": {"key": key}})
    line = error_line(error, "apiServer.key")
    assert "10 characters" in line and "16" in line and "openssl rand -hex 32" in line, line
    assert key not in error, error
    assert_readable(line)


def test_a_key_of_sixteen_characters_renders() -> None:
    assert render({"apiServer": {"key": "0123456789abcdef"}}).deployment


# --- global.storageClass reaches every claim ---------------------------------------------


def claim_classes(manifest: Manifest) -> dict[str, str | None]:
    """storageClassName of every claim: PVCs and each pod's ephemeral volume claims."""
    classes: dict[str, str | None] = {
        c["metadata"]["name"]: c["spec"].get("storageClassName")
        for c in manifest.all("PersistentVolumeClaim")
    }
    for where, pod in pod_specs(manifest):
        for volume in pod.get("volumes", []):
            if "ephemeral" in volume:
                spec = volume["ephemeral"]["volumeClaimTemplate"]["spec"]
                classes[f"{where}/{volume['name']}"] = spec.get("storageClassName")
    return classes


@pytest.mark.parametrize("mode", ["cronjob", "sidecar"])
def test_global_storage_class_reaches_every_claim_with_the_scratch_volume(mode: str) -> None:
    classes = claim_classes(render({"global": {"storageClass": "fast"}, "backup": {"mode": mode}}))
    scratch = [name for name in classes if name.endswith("/backup-scratch")]
    assert scratch, classes
    assert set(classes.values()) == {"fast"}, classes


def test_no_class_dash_reaches_the_scratch_volume_too() -> None:
    classes = claim_classes(render({"global": {"storageClass": "-"}}))
    assert set(classes.values()) == {""}, classes


def test_a_claims_own_class_still_wins() -> None:
    classes = claim_classes(
        render(
            {
                "global": {"storageClass": "fast"},
                "backup": {"scratch": {"storageClass": "local"}},
            }
        )
    )
    scratch = {name: c for name, c in classes.items() if name.endswith("/backup-scratch")}
    assert set(scratch.values()) == {"local"}, classes
    assert classes[f"{FULLNAME}-data"] == "fast", classes
