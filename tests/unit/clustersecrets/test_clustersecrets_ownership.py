"""Which existing Secrets the secrets Job keeps: its own (marked with their uid), adopted ones.

The Secrets below are shaped as the API server returns them (GET /api/v1/.../secrets/NAME);
the calls themselves run against a real API server in the e2e tier. A pre-created Secret gets
every mark a creator can write (labels, annotations, managedFields naming our field manager, a
uid annotation of its own choosing) and is still refused: only the uid the API server assigned
counts.
"""

from __future__ import annotations

import base64
from typing import Any

import pytest

from hermes_runtime.clustersecrets.ensure import FIELD_MANAGER, GENERATED_BY
from hermes_runtime.clustersecrets.ownership import (
    MANAGED_BY,
    OWNED_UID,
    Refused,
    Verdict,
    is_owned,
    judge,
    mark_patch,
)

NAME = "hermes-hermes-agent-backup-password"
KEY = "RESTIC_PASSWORD"
UID = "5a7c1e3e-2f64-4bb4-9d7e-0f7d0b6f2a11"


def secret(
    annotations: dict[str, str] | None = None,
    data: dict[str, str] | None = None,
    uid: str = UID,
    **metadata: Any,
) -> dict[str, Any]:
    value = base64.b64encode(b"known-to-whoever-made-it").decode()
    return {
        "kind": "Secret",
        "apiVersion": "v1",
        "metadata": {
            "name": NAME,
            "namespace": "agents",
            "uid": uid,
            "resourceVersion": "4711",
            "creationTimestamp": "2026-12-06T07:00:00Z",
            "annotations": annotations or {},
            **metadata,
        },
        "data": {KEY: value} if data is None else data,
        "type": "Opaque",
    }


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch, as the API server applies application/merge-patch+json."""
    if not isinstance(patch, dict):
        return patch
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def forged() -> dict[str, Any]:
    """A Secret pre-created with every mark a creator controls."""
    return secret(
        annotations={GENERATED_BY: "secrets-ensure", OWNED_UID: "guessed-or-copied-uid"},
        labels={**MANAGED_BY, "app.kubernetes.io/instance": "hermes"},
        managedFields=[{"manager": FIELD_MANAGER, "operation": "Update", "apiVersion": "v1"}],
    )


def test_a_secret_marked_with_its_own_uid_is_kept() -> None:
    marked = secret({OWNED_UID: UID})
    assert is_owned(marked)
    assert judge(marked, KEY, "agents", adopt=False) is Verdict.KEEP
    assert judge(marked, KEY, "agents", adopt=True) is Verdict.KEEP  # adopting it changes nothing


def test_a_pre_created_secret_is_refused_whatever_it_claims() -> None:
    with pytest.raises(Refused) as refused:
        judge(forged(), KEY, "agents", adopt=False)
    message = str(refused.value)
    assert f"Secret agents/{NAME} exists but was not created by the chart's secrets Job" in message
    assert f"secretsJob.adoptExisting: [{NAME}]" in message
    assert f"--adopt {NAME}" in message
    assert "delete it" in message


@pytest.mark.parametrize(
    "unmarked",
    [
        secret(),  # made by an earlier chart, or restored from a cluster backup
        secret({OWNED_UID: UID}, uid=""),  # no uid to compare: never the Job's
        secret({OWNED_UID: "8b1f4a0c-0000-4000-8000-000000000000"}),  # another object's mark
        {"metadata": {"name": NAME}, "data": {KEY: "eA=="}},  # no annotations at all
    ],
)
def test_a_secret_without_its_own_uid_as_mark_is_not_owned(unmarked: dict[str, Any]) -> None:
    assert not is_owned(unmarked)
    with pytest.raises(Refused, match="adoptExisting"):
        judge(unmarked, KEY, "agents", adopt=False)


def test_an_unmarked_secret_named_for_adoption_is_adopted() -> None:
    assert judge(forged(), KEY, "agents", adopt=True) is Verdict.ADOPT


@pytest.mark.parametrize("data", [{}, {KEY: ""}, {"other": "eA=="}])
@pytest.mark.parametrize("annotations", [{OWNED_UID: UID}, {}])
def test_a_secret_without_the_key_is_refused_even_when_adopted_or_owned(
    data: dict[str, str], annotations: dict[str, str]
) -> None:
    with pytest.raises(Refused) as refused:
        judge(secret(annotations, data=data), KEY, "agents", adopt=True)
    assert f"Secret agents/{NAME} exists without a value for key {KEY!r}" in str(refused.value)


def test_the_mark_is_the_uid_the_api_server_assigned_and_conditional_on_what_was_read() -> None:
    created = secret(
        {GENERATED_BY: "secrets-ensure"}, labels={"app.kubernetes.io/managed-by": "Helm"}
    )
    patch = mark_patch(created)
    # Preconditions: the API server refuses the patch when the object was replaced
    # (another uid) or changed (another resourceVersion) since it was read.
    assert patch["metadata"]["uid"] == UID
    assert patch["metadata"]["resourceVersion"] == "4711"
    marked = merge_patch(created, patch)
    assert is_owned(marked)
    assert marked["data"] == created["data"]  # the value is never touched
    assert marked["metadata"]["annotations"] == {GENERATED_BY: "secrets-ensure", OWNED_UID: UID}
    # Its labels stay: a Secret a Helm release owns stays that release's (a rollback finds it).
    assert marked["metadata"]["labels"] == {"app.kubernetes.io/managed-by": "Helm"}
    assert judge(marked, KEY, "agents", adopt=False) is Verdict.KEEP


def test_a_mark_copied_onto_another_secret_does_not_make_it_owned() -> None:
    """The mark of one Secret, pasted into a Secret created later: that one has its own uid."""
    original = merge_patch(secret(), mark_patch(secret()))
    copy = secret(
        dict(original["metadata"]["annotations"]), uid="0e0e0e0e-1111-4222-8333-444444444444"
    )
    assert is_owned(original)
    assert not is_owned(copy)
