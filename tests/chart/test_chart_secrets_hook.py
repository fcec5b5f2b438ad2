"""The secrets Job as Helm runs it: its policy first, its RBAC gone after it, success or not.

Helm runs a hook's objects in hook-weight order and deletes them by their
`helm.sh/hook-delete-policy` once the Job has finished or the hook phase has failed, so the
weights and policies rendered here are what decides whether the Job's NetworkPolicy is in
place before its first pod and whether a failed Job leaves a Role that may create Secrets.
The Job's arguments are parsed by the real CLI, as the container will.
"""

from __future__ import annotations

from typing import Any

import pytest
from chart_testlib import FULLNAME, Manifest, render, render_error

from hermes_runtime.cli import build_parser
from hermes_runtime.clustersecrets.ownership import Refused
from hermes_runtime.common.errors import RuntimeFailure

NAME = f"{FULLNAME}-secrets"
API = f"{FULLNAME}-api"
PASSWORD = f"{FULLNAME}-backup-password"
HOOK_KINDS = ("NetworkPolicy", "ServiceAccount", "Role", "RoleBinding", "Job")
RBAC = ("ServiceAccount", "Role", "RoleBinding")


def hook_objects(manifest: Manifest) -> dict[str, dict[str, Any]]:
    return {kind: manifest.one(kind, NAME) for kind in HOOK_KINDS}


def annotation(obj: dict[str, Any], key: str) -> str:
    return str(obj["metadata"]["annotations"][key])


def delete_policy(obj: dict[str, Any]) -> set[str]:
    return set(annotation(obj, "helm.sh/hook-delete-policy").split(","))


def weight(obj: dict[str, Any]) -> int:
    return int(annotation(obj, "helm.sh/hook-weight"))


def job_args(manifest: Manifest) -> list[str]:
    job = manifest.one("Job", NAME)
    return list(job["spec"]["template"]["spec"]["containers"][0]["args"])


def test_every_object_of_the_job_is_a_pre_install_and_pre_upgrade_hook() -> None:
    for kind, obj in hook_objects(render()).items():
        assert annotation(obj, "helm.sh/hook") == "pre-install,pre-upgrade", kind


def test_the_policy_is_in_place_before_anything_the_job_needs() -> None:
    """Lowest weight of the hook: Helm creates it first, before the Job's pod can exist; it is
    replaced before the next run and not deleted behind a running Job."""
    objects = hook_objects(render())
    policy = objects["NetworkPolicy"]
    assert delete_policy(policy) == {"before-hook-creation"}
    assert all(weight(policy) < weight(obj) for kind, obj in objects.items() if obj is not policy)


def test_the_job_runs_after_its_rbac_and_the_rbac_goes_on_success_and_on_failure() -> None:
    objects = hook_objects(render())
    job = objects["Job"]
    for kind in RBAC:
        assert weight(objects[kind]) < weight(job), kind
        assert delete_policy(objects[kind]) == {
            "before-hook-creation",
            "hook-succeeded",
            "hook-failed",
        }, kind
    assert weight(objects["ServiceAccount"]) <= weight(objects["RoleBinding"])
    assert weight(objects["Role"]) <= weight(objects["RoleBinding"])


def test_a_failed_job_stays_with_its_pods_logs_and_helm_prints_them() -> None:
    job = render().one("Job", NAME)
    assert delete_policy(job) == {"before-hook-creation", "hook-succeeded"}  # not hook-failed
    assert annotation(job, "helm.sh/hook-output-log-policy") == "hook-failed"
    assert job["spec"]["template"]["spec"]["restartPolicy"] == "Never"  # pods kept on failure


def test_common_annotations_do_not_replace_the_hook_annotations() -> None:
    manifest = render({"commonAnnotations": {"team": "agents"}})
    for kind, obj in hook_objects(manifest).items():
        assert annotation(obj, "team") == "agents", kind
        assert annotation(obj, "helm.sh/hook") == "pre-install,pre-upgrade", kind


def test_the_role_may_mark_only_the_generated_secrets() -> None:
    (named, create) = render().one("Role", NAME)["rules"]
    assert named["resourceNames"] == [API, PASSWORD]
    assert named["verbs"] == ["get", "patch"]
    assert create == {"apiGroups": [""], "resources": ["secrets"], "verbs": ["create"]}


def test_without_networkpolicy_the_job_has_no_policy_and_without_generated_secrets_no_job() -> None:
    off = render({"networkPolicy": {"enabled": False}})
    assert off.one("Job", NAME)
    assert not off.all("NetworkPolicy")
    given = render(
        {
            "apiServer": {"existingSecret": "mine"},
            "backup": {"repository": {"existingSecret": "restic"}},
        }
    )
    assert not [o for o in given.objects if o["metadata"]["name"] == NAME]


def test_adopted_names_reach_the_job_and_the_cli_accepts_them() -> None:
    manifest = render({"secretsJob": {"adoptExisting": [PASSWORD]}})
    args = job_args(manifest)
    assert args[args.index("--adopt") + 1] == PASSWORD
    assert args.count("--adopt") == 1
    parsed = build_parser(["secrets"]).parse_args(args[1:])  # args[0] is the program
    assert parsed.adopt == [PASSWORD]
    assert [str(s) for s in parsed.secret] == [f"{API}/api-key", f"{PASSWORD}/RESTIC_PASSWORD"]
    assert "--adopt" not in job_args(render())


def test_adopting_a_secret_the_chart_does_not_generate_is_refused_naming_it() -> None:
    error = render_error({"secretsJob": {"adoptExisting": [PASSWORD, "someone-else"]}})
    assert 'secretsJob.adoptExisting[1]: "someone-else" is not a Secret the chart generates' in (
        error
    )
    assert f"({API}, {PASSWORD})" in error
    given = render_error(
        {
            "apiServer": {"existingSecret": "mine"},
            "backup": {"repository": {"existingSecret": "restic"}},
            "secretsJob": {"adoptExisting": [API]},
        }
    )
    assert f'secretsJob.adoptExisting[0]: "{API}" is not a Secret' in given
    assert "none: every Secret is given or comes from Vault" in given


@pytest.mark.parametrize("bad", ["Upper", "-x", "a_b"])
def test_an_adopted_name_must_be_a_secret_name(bad: str) -> None:
    assert "/secretsJob/adoptExisting/0" in render_error({"secretsJob": {"adoptExisting": [bad]}})


def test_a_refused_secret_fails_the_job_at_once_other_failures_are_retried() -> None:
    spec = render().one("Job", NAME)["spec"]
    assert spec["backoffLimit"] > 0  # an API server not reachable yet is retried
    (rule,) = spec["podFailurePolicy"]["rules"]
    assert rule["action"] == "FailJob"
    exits = rule["onExitCodes"]
    assert (exits["containerName"], exits["operator"]) == ("secrets", "In")
    assert exits["values"] == [Refused.exit_code] != [RuntimeFailure.exit_code]
