"""A fleet of releases in one cluster: names, agents and schedules that never step on each other.

Platform teams run one release per agent, many to a namespace, all backing up to one bucket,
prefix and password. So each release must render objects whose names are valid for their kind
and unique whatever the release name's length (helm refuses names over 53 characters itself),
back up, prune, restore and replicate as an agent of its own (`<namespace>.<release>`, the
runtime's HERMES_RUNTIME_AGENT), and start its backups at a minute of its own, the same minute
at every render (GitOps compares renders).
"""

from __future__ import annotations

import hashlib
import itertools
import json
import re
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
from chart_testlib import (
    CHART,
    EXAMPLE_NAMES,
    FULLNAME,
    NAMESPACE,
    RELEASE,
    SERVICE_MONITOR_API,
    Manifest,
    all_containers,
    env_map,
    pod_specs,
    render,
    render_error,
    run_helm,
    template,
)
from kubernetes_validate import validate

from hermes_runtime.backup.agents import MAX_LENGTH, agent_problem

SCHEMA_AGENT_PATTERN_PATH = ("backup", "agentName")
API_VERSIONS = (SERVICE_MONITOR_API, "monitoring.coreos.com/v1/PrometheusRule")
CRD_GROUPS = ("monitoring.coreos.com/",)
LONGEST_RELEASE = 53  # helm's own limit (Kubernetes' 63 less room for its suffixes)

# Every object the chart can make, on top of the defaults: the client label, the PDB, the
# replication sidecar. (restore.fromSnapshot adds a container but takes the pre-upgrade Job.)
ALL_OBJECTS: dict[str, Any] = {
    "networkPolicy": {"enabled": True, "ingress": {"api": "clients"}},
    "podDisruptionBudget": {"enabled": True},
    "backup": {"continuous": {"enabled": True}},
}
RESTORE = {"restore": {"fromSnapshot": "latest", "fromReplicas": True}}
SOURCES: list[tuple[tuple[str, ...], dict[str, Any] | None]] = [
    ((), None),
    *[((name,), None) for name in EXAMPLE_NAMES],
    ((), ALL_OBJECTS),
]
SOURCE_IDS = ["defaults", *EXAMPLE_NAMES, "all-objects"]

DNS1123_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
DNS1035_LABEL = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")
DNS1123_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
LABEL_NAME = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")
BACKUP_VERB = re.compile(r"hermes-runtime\s+backup\s+(create|list|verify|restore|prune|replicate)")


def release_name(length: int, last: str = "a") -> str:
    """A release name of `length` characters ending in `last`: two such names differ only
    past any cut a truncation would make."""
    return ("team-" + "agents-" * 9)[: length - 2].rstrip("-").ljust(length - 2, "x") + "-" + last


def fleet_render(
    examples: tuple[str, ...],
    overrides: dict[str, Any] | None,
    release: str,
    namespace: str = NAMESPACE,
) -> Manifest:
    return render(
        overrides,
        examples=examples,
        api_versions=API_VERSIONS,
        release=release,
        namespace=namespace,
    )


def name_problem(kind: str, name: str) -> str | None:
    """Why `name` cannot name a `kind` the chart makes, or None. Every name is a DNS-1123
    label (63: a Job's name is its pods' job-name label, a Deployment's starts its pods'
    names), a Service's a DNS-1035 one, a CronJob's at most 52 (its Jobs add 11)."""
    limit = 52 if kind == "CronJob" else 63
    rule = DNS1035_LABEL if kind == "Service" else DNS1123_LABEL
    if len(name) > limit:
        return f"{len(name)} characters, over {limit}"
    if not rule.fullmatch(name):
        return f"not a {'DNS-1035' if kind == 'Service' else 'DNS-1123'} label"
    return None


def label_key_problem(key: str) -> str | None:
    prefix, _, name = key.rpartition("/")
    if prefix and (len(prefix) > 253 or not DNS1123_SUBDOMAIN.fullmatch(prefix)):
        return f"prefix {prefix!r} is not a DNS-1123 subdomain"
    if len(name) > 63 or not LABEL_NAME.fullmatch(name):
        return f"name {name!r} ({len(name)} characters) is not a label name"
    return None


def label_value_problem(value: object) -> str | None:
    text = str(value)
    if len(text) > 63 or (text and not LABEL_NAME.fullmatch(text)):
        return f"value {text!r} ({len(text)} characters) is not a label value"
    return None


def label_maps(node: object, path: str = "") -> Iterator[tuple[str, dict]]:
    """Every map of Kubernetes labels in an object: labels, matchLabels, nodeSelector and a
    Service's selector; not the alert labels of a PrometheusRule's rules."""
    if isinstance(node, dict):
        for key, value in node.items():
            here = f"{path}.{key}"
            if key == "groups":
                continue
            is_selector = key == "selector" and isinstance(value, dict)
            plain_selector = is_selector and not {"matchLabels", "matchExpressions"} & set(value)
            named = key in ("labels", "matchLabels", "nodeSelector") or plain_selector
            if named and isinstance(value, dict):
                yield here, value
                continue
            yield from label_maps(value, here)
    elif isinstance(node, list):
        for i, item in enumerate(node):
            yield from label_maps(item, f"{path}[{i}]")


def problems(manifest: Manifest) -> list[str]:
    """Every invalid name, label key or value, and every name two objects of one kind share."""
    found = []
    for kind, count in Counter(
        (o["kind"], o["metadata"]["name"]) for o in manifest.objects
    ).items():
        if count > 1:
            found.append(f"{kind[0]}/{kind[1]}: {count} objects of that name")
    for obj in manifest.objects:
        where = f"{obj['kind']}/{obj['metadata']['name']}"
        problem = name_problem(obj["kind"], obj["metadata"]["name"])
        if problem:
            found.append(f"{where}: {problem}")
        for path, labels in label_maps(obj):
            for key, value in labels.items():
                for issue in (label_key_problem(key), label_value_problem(value)):
                    if issue:
                        found.append(f"{where} {path}: {issue}")
    return found


def agents_of(manifest: Manifest) -> set[str]:
    return {
        env_map(c)["HERMES_RUNTIME_AGENT"]
        for _, pod in pod_specs(manifest)
        for c in all_containers(pod)
        if "HERMES_RUNTIME_AGENT" in env_map(c)
    }


def client_label(manifest: Manifest) -> str:
    (label,) = [k for k in manifest.one("Pod")["metadata"]["labels"] if k.endswith("-client")]
    return label


def schedules(manifest: Manifest) -> dict[str, str]:
    return {o["metadata"]["name"]: o["spec"]["schedule"] for o in manifest.all("CronJob")}


def release_hash(namespace: str, release: str) -> int:
    return int(hashlib.sha256(f"{namespace}/{release}".encode()).hexdigest()[:8], 16)


# --- names -----------------------------------------------------------------------------------


@pytest.mark.parametrize(("examples", "overrides"), SOURCES, ids=SOURCE_IDS)
def test_release_names_up_to_the_longest_render_valid_unique_names(
    examples: tuple[str, ...], overrides: dict[str, Any] | None
) -> None:
    """38 characters gave the backup and verify CronJobs one name, 44 a client label key over
    63, 50 one name to the Services, NetworkPolicies and PrometheusRules."""
    for length in range(38, LONGEST_RELEASE + 1):
        release = release_name(length)
        manifest = fleet_render(examples, overrides, release)
        assert problems(manifest) == [], (length, release)
        assert agents_of(manifest) == {f"{NAMESPACE}.{release}"}, length
    for obj in manifest.objects:  # the longest: Kubernetes' own schemas too
        if not obj["apiVersion"].startswith(CRD_GROUPS):
            validate(obj, "1.37", strict=True)


@pytest.mark.parametrize("length", range(LONGEST_RELEASE + 1, 64))
def test_release_names_over_53_characters_are_refused_naming_the_limit(length: int) -> None:
    refused = template(release=release_name(length))
    assert refused.returncode != 0
    assert "must not be longer than 53" in refused.stderr, refused.stderr


def test_a_63_character_fullname_and_namespace_still_fit() -> None:
    """fullnameOverride takes up to 63 characters (the Service's limit), a namespace 63: the
    agent name `<namespace>.<release>` (117) stays within the runtime's 128."""
    namespace = ("ns-" + "n" * 63)[:63]
    release = release_name(LONGEST_RELEASE)
    manifest = fleet_render((), {**ALL_OBJECTS, "fullnameOverride": "f" * 63}, release, namespace)
    assert problems(manifest) == []
    (agent,) = agents_of(manifest)
    assert agent == f"{namespace}.{release}" and agent_problem(agent) is None


def test_names_that_fit_are_unchanged() -> None:
    """Short names keep the plain `<fullname>-<suffix>`: nothing renamed under a release."""
    manifest = fleet_render((), ALL_OBJECTS, RELEASE)
    names = {o["metadata"]["name"] for o in manifest.objects}
    for suffix in ("backup", "verify", "pre-upgrade", "metrics", "data", "secrets", "test"):
        assert f"{FULLNAME}-{suffix}" in names
    assert client_label(manifest) == f"{FULLNAME}-client"


@pytest.mark.parametrize("release", ["team.a", "1team"])
def test_a_release_name_the_service_cannot_carry_is_refused(release: str) -> None:
    refused = template(release=release)
    assert refused.returncode != 0
    assert "release name" in refused.stderr and "DNS-1035" in refused.stderr, refused.stderr


# --- two releases in one namespace -------------------------------------------------------------

PAIRS = [
    ("team-a", "team-b"),
    *[(release_name(n, "a"), release_name(n, "b")) for n in (38, 50, LONGEST_RELEASE)],
]


@pytest.mark.parametrize(("examples", "overrides"), SOURCES, ids=SOURCE_IDS)
def test_two_releases_in_one_namespace_share_no_name_and_no_agent(
    examples: tuple[str, ...], overrides: dict[str, Any] | None
) -> None:
    for first, second in PAIRS:
        one = fleet_render(examples, overrides, first)
        two = fleet_render(examples, overrides, second)
        both = Manifest(one.objects + two.objects)
        assert [p for p in problems(both) if "objects of that name" in p] == [], (first, second)
        assert agents_of(one) == {f"{NAMESPACE}.{first}"}
        assert agents_of(two) == {f"{NAMESPACE}.{second}"}
        if one.has("Pod"):
            assert client_label(one) != client_label(two)


# --- the agent every backup verb acts on --------------------------------------------------------


def backup_verb_containers(manifest: Manifest) -> dict[str, dict]:
    """`<object>/<container>` -> container, for every container that runs a backup verb."""
    found = {}
    for where, pod in pod_specs(manifest):
        for c in all_containers(pod):
            if BACKUP_VERB.search(" ".join([*c.get("command", []), *c.get("args", [])])):
                found[f"{where}/{c['name']}"] = c
    return found


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        (
            ALL_OBJECTS,
            {
                f"CronJob/{FULLNAME}-backup/backup",
                f"CronJob/{FULLNAME}-verify/backup",
                f"Job/{FULLNAME}-pre-upgrade/backup",
                f"Deployment/{FULLNAME}/replicate",
            },
        ),
        (
            {**ALL_OBJECTS, **RESTORE},
            {
                f"CronJob/{FULLNAME}-backup/backup",
                f"CronJob/{FULLNAME}-verify/backup",
                f"Deployment/{FULLNAME}/restore",
                f"Deployment/{FULLNAME}/replicate",
            },
        ),
        (
            {
                **ALL_OBJECTS,
                **RESTORE,
                "backup": {"mode": "sidecar", "continuous": {"enabled": True}},
            },
            {
                f"Deployment/{FULLNAME}/backup",
                f"Deployment/{FULLNAME}/restore",
                f"Deployment/{FULLNAME}/replicate",
            },
        ),
    ],
    ids=["cronjob", "restore", "sidecar"],
)
def test_every_backup_verb_runs_as_the_releases_agent(values: dict, expected: set[str]) -> None:
    manifest = render(values)
    containers = backup_verb_containers(manifest)
    assert set(containers) == expected
    for where, container in containers.items():
        assert env_map(container)["HERMES_RUNTIME_AGENT"] == f"{NAMESPACE}.{RELEASE}", where
    assert agents_of(manifest) == {f"{NAMESPACE}.{RELEASE}"}  # and no other container


@pytest.mark.parametrize("name", ["hermes-runtime", "team-a.hermes", "A_b.c-9"])
def test_backup_agent_name_overrides_the_default(name: str) -> None:
    values = {**ALL_OBJECTS, "backup": {"agentName": name, "continuous": {"enabled": True}}}
    assert agents_of(render(values)) == {name}


@pytest.mark.parametrize("name", ["a..b", "-a", "a-", "a/b", "a b", ".a", "x" * (MAX_LENGTH + 1)])
def test_agent_names_the_runtime_refuses_are_refused_by_the_schema(name: str) -> None:
    assert agent_problem(name) is not None
    assert "/backup/agentName" in render_error({"backup": {"agentName": name}})


def test_the_schema_pattern_is_the_runtimes_rule() -> None:
    """The schema cannot say "no '..'" with the runtime's regex (Go's RE2 has no lookahead),
    so its pattern is another regex: the same answer for every short name of the characters
    that matter, and the same length limit."""
    node = json.loads((CHART / "values.schema.json").read_text())
    for part in SCHEMA_AGENT_PATTERN_PATH:
        node = node["properties"][part]
    assert node["maxLength"] == MAX_LENGTH
    pattern = re.compile(node["pattern"])
    for length in range(1, 7):
        for chars in itertools.product("aZ9._-/", repeat=length):
            name = "".join(chars)
            assert bool(pattern.search(name)) == (agent_problem(name) is None), name
    assert pattern.search("")  # empty: <namespace>.<release>


def test_notes_show_the_agent_its_replicas_and_the_client_label() -> None:
    release = release_name(LONGEST_RELEASE)
    args = ["install", release, str(CHART), "--namespace", NAMESPACE, "--dry-run=client"]
    for key, value in (
        ("backup.continuous.enabled", "true"),
        ("networkPolicy.enabled", "true"),
        ("networkPolicy.ingress.api", "clients"),
    ):
        args += ["--set", f"{key}={value}"]
    done = run_helm(args)
    assert done.returncode == 0, done.stderr
    notes = done.stdout.split("NOTES:", 1)[1]
    agent = f"{NAMESPACE}.{release}"
    assert f"file:///backup/litestream/{agent}/" in notes
    assert f"--agent {agent}" in notes
    values = {"networkPolicy": {"enabled": True, "ingress": {"api": "clients"}}}
    label = client_label(fleet_render((), values, release))
    assert len(label) <= 63 and f'{label}: "true"' in notes


# --- schedules --------------------------------------------------------------------------------


def test_schedules_are_spread_across_a_fleet_by_a_stable_hash() -> None:
    """Unset, the backup runs at a minute of 03:00-03:59 and the verify weekly at 04:00-06:59,
    taken from SHA-256 of `<namespace>/<release>`: twelve releases with the same values
    start at different minutes, each one where the formula puts it."""
    minutes = []
    for i in range(1, 13):
        release = f"agent-{i:02d}"
        h = release_hash(NAMESPACE, release)
        found = schedules(fleet_render((), None, release))
        assert found == {
            f"{release}-hermes-agent-backup": f"{h % 60} 3 * * *",
            f"{release}-hermes-agent-verify": f"{h % 60} {4 + h // 60 % 3} * * {h // 1440 % 7}",
        }
        minutes.append(h % 60)
    assert len(set(minutes)) >= 9, minutes
    team_a, team_b = (schedules(fleet_render((), None, r)) for r in ("team-a", "team-b"))
    assert set(team_a.values()).isdisjoint(team_b.values())


def test_the_same_release_renders_the_same_schedule_every_time() -> None:
    """Argo CD renders on every refresh: a schedule that changed by itself would never sync."""
    first = template(release="team-a", namespace="fleet")
    second = template(release="team-a", namespace="fleet")
    assert first.returncode == 0, first.stderr
    assert first.stdout == second.stdout
    other_namespace = template(release="team-a", namespace="fleet-2")
    assert other_namespace.stdout != first.stdout


@pytest.mark.parametrize("schedule", ["5 4 * * *", "5  4 * * 1-5", "@daily"])
def test_a_schedule_that_is_set_is_used_as_is(schedule: str) -> None:
    values = {"backup": {"schedule": schedule, "verify": {"schedule": schedule}}}
    assert set(schedules(render(values)).values()) == {schedule}


def test_h_in_a_schedule_is_the_releases_number() -> None:
    h = release_hash(NAMESPACE, RELEASE)
    values = {"backup": {"schedule": "H */4 * * *", "verify": {"schedule": "H H * * H"}}}
    assert schedules(render(values)) == {
        f"{FULLNAME}-backup": f"{h % 60} */4 * * *",
        f"{FULLNAME}-verify": f"{h % 60} {h // 60 % 24} * * {h // 1440 % 7}",
    }


def test_h_where_it_has_no_meaning_is_refused_naming_the_field() -> None:
    error = render_error({"backup": {"verify": {"schedule": "0 4 H * *"}}})
    assert 'backup.verify.schedule: day-of-month field of "0 4 H * *"' in error, error
    assert "only in the minute, hour and day-of-week fields" in error, error
