"""Whether an existing Secret is one the secrets Job made: the one mark its creator cannot forge.

Anyone who may create Secrets in the namespace can create one under a generated name before
the Job first runs, holding a password they know. Everything in a create request is theirs to
choose: labels, annotations, owner references, even ``metadata.managedFields`` and its manager
name (the API server takes both from the request). What they cannot choose is
``metadata.uid``: the API server assigns it when it stores the object. So the Job, right after
creating a Secret, writes that uid into the Secret's ``OWNED_UID`` annotation with a patch
conditional on the resourceVersion it created; a Secret is the Job's when that annotation
equals its own uid. A creator cannot know the uid before its request, and one who may only
create cannot patch afterwards.

Limits, stated because they are real: whoever may patch or update the Secret can copy its uid
into the annotation, but they can change the password itself too, so the check guards against
creators, not editors. A Secret recreated with the same content (restored from a cluster
backup, or made by an earlier chart that had no Job) carries no matching uid, and a Job stopped
between its create and its patch leaves one unmarked: each is refused until adopted on purpose
(``secretsJob.adoptExisting``, ``secrets ensure --adopt``), which marks it.
"""

from __future__ import annotations

from enum import Enum
from typing import Any

from hermes_runtime.common.errors import RuntimeFailure

OWNED_UID = "hermes-runtime/owned-uid"
# On the Secrets the Job creates: for people and selectors, never a proof (anyone can set it).
MANAGED_BY = {"app.kubernetes.io/managed-by": "hermes-runtime"}
ADOPT_VALUE = "secretsJob.adoptExisting"


class Refused(RuntimeFailure):
    """An existing Secret the Job may not keep: not its own, or without the key.

    Its own exit status, so the Job's ``podFailurePolicy`` fails the Job at the first refusal:
    another try would read the same Secret and refuse it again."""

    exit_code = 3


class Verdict(Enum):
    """What ``ensure`` does with an existing Secret it may keep."""

    KEEP = "kept"  # marked by an earlier run
    ADOPT = "adopted"  # not marked, named for adoption: mark it, then keep it


def is_owned(secret: dict[str, Any]) -> bool:
    """True when the Secret's ``OWNED_UID`` annotation holds its own (server-assigned) uid."""
    metadata = secret.get("metadata") or {}
    uid = metadata.get("uid")
    return bool(uid) and (metadata.get("annotations") or {}).get(OWNED_UID) == uid


def judge(secret: dict[str, Any], key: str, namespace: str, adopt: bool) -> Verdict:
    """Keep a marked Secret, adopt an unmarked one only when asked; refuse anything else.

    A Secret that is kept or adopted must hold a value under ``key``: one without it is someone
    else's layout, refused and never patched."""
    name = (secret.get("metadata") or {}).get("name", "?")
    owned = is_owned(secret)
    if not owned and not adopt:
        raise Refused(
            f"Secret {namespace}/{name} exists but was not created by the chart's secrets Job "
            f"(its {OWNED_UID} annotation does not hold its uid), so whoever created it may know "
            f"its value: delete it to have a new one generated, or adopt it on purpose with "
            f"{ADOPT_VALUE}: [{name}] (secrets ensure --adopt {name})"
        )
    if not (secret.get("data") or {}).get(key):
        raise Refused(
            f"Secret {namespace}/{name} exists without a value for key {key!r}: add it, or "
            "delete the Secret to have one generated (never changed in place)"
        )
    return Verdict.KEEP if owned else Verdict.ADOPT


def mark_patch(secret: dict[str, Any]) -> dict[str, Any]:
    """A JSON merge patch that marks ``secret`` as the Job's: its uid into ``OWNED_UID``.

    The patch carries the uid and resourceVersion that were read, which the API server checks
    before applying it (a conflict if the Secret was replaced or changed since): only the very
    object created, or the one the operator named for adoption as it was read, gets marked.
    Nothing else changes: an adopted Secret keeps its labels, so one a Helm release owns
    (an earlier chart made it) is still that release's on a rollback."""
    metadata = secret["metadata"]
    return {
        "metadata": {
            "uid": metadata["uid"],
            "resourceVersion": metadata["resourceVersion"],
            "annotations": {OWNED_UID: metadata["uid"]},
        }
    }
