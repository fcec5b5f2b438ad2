"""Create each generated Secret that does not exist yet; keep one this Job made, never change it.

A Secret found under a generated name is kept only when it carries the Job's mark (see
:mod:`hermes_runtime.clustersecrets.ownership`), or when the operator named it for adoption;
any other is refused, because whoever created it may know its value. Every wanted Secret is
looked at before the run fails, so one refusal still lets the others be created, and the
error names each refused Secret.
"""

from __future__ import annotations

import base64
import re
import secrets
from collections.abc import Collection, Iterable, Mapping
from dataclasses import asdict, dataclass
from typing import Any

import httpx

from hermes_runtime.clustersecrets.api import InClusterApi, describe
from hermes_runtime.clustersecrets.ownership import (
    MANAGED_BY,
    Refused,
    Verdict,
    judge,
    mark_patch,
)
from hermes_runtime.common.errors import RuntimeFailure
from hermes_runtime.common.logs import log_event

# RFC 1123 subdomain (a Secret's name) and a Secret data key.
SECRET_NAME = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")
DATA_KEY = re.compile(r"^[-._a-zA-Z0-9]{1,253}$")
GENERATED_BYTES = 36  # 48 URL-safe characters, as the chart's randAlphaNum 48 gave
GENERATED_BY = "hermes-runtime/generated-by"
# The field manager the API server records for our writes: a name for people reading
# managedFields, never a proof (a creator may send any name).
FIELD_MANAGER = "hermes-runtime-secrets"
# What the API server may answer to a patch whose uid or resourceVersion no longer match.
STALE = (409, 422)
NETWORK_HINT = (
    "with the chart's NetworkPolicy on, this Job reaches only networkPolicy.kubeApi.cidrs "
    "(unset: the private ranges) on networkPolicy.kubeApi.ports: give the API server's "
    "addresses and ports there (`kubectl get endpoints kubernetes -n default`)"
)


@dataclass(frozen=True)
class GeneratedSecret:
    """A Secret ``name`` whose ``key`` holds a random value made once, here."""

    name: str
    key: str

    def __str__(self) -> str:
        return f"{self.name}/{self.key}"


@dataclass(frozen=True)
class EnsureResult(GeneratedSecret):
    """What ``ensure`` did with a Secret: ``created``, ``kept`` or ``adopted``."""

    action: str

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def parse_generated(text: str) -> GeneratedSecret:
    """``NAME/KEY``, each checked as Kubernetes checks them."""
    name, slash, key = text.partition("/")
    if not slash or not SECRET_NAME.match(name) or not DATA_KEY.match(key):
        raise RuntimeFailure(
            f"--secret {text!r} is not NAME/KEY (a Secret name: lower-case letters, digits, "
            "'-' and '.'; a key: letters, digits, '-', '_' and '.')"
        )
    return GeneratedSecret(name, key)


def ensure_secrets(
    api: InClusterApi,
    wanted: Iterable[GeneratedSecret],
    labels: Mapping[str, str],
    adopt: Collection[str] = (),
) -> list[EnsureResult]:
    """Each wanted Secret exists with its key and the Job's mark afterwards, or the run fails.

    ``adopt`` names Secrets that may exist unmarked (the operator vouches for their value):
    they are marked and kept. A refusal does not stop the others; all refusals are raised
    together at the end."""
    results: list[EnsureResult] = []
    refused: list[str] = []
    with api.client() as http:
        for secret in wanted:
            try:
                results.append(_ensure_one(api, http, secret, labels, secret.name in adopt))
            except Refused as exc:
                log_event("secrets.refused", secret=secret.name, namespace=api.namespace)
                refused.append(str(exc))
    if refused:
        raise Refused("; ".join(refused))
    return results


def _ensure_one(
    api: InClusterApi,
    http: httpx.Client,
    secret: GeneratedSecret,
    labels: Mapping[str, str],
    adopt: bool,
) -> EnsureResult:
    existing = _read(api, http, secret)
    if existing is None:
        created = _create(api, http, secret, labels)
        if created is not None:
            _mark(api, http, secret, created)
            return _outcome(api, secret, "created")
        existing = _read(api, http, secret)  # made meanwhile (a concurrent run)
        if existing is None:
            raise RuntimeFailure(
                f"Secret {api.namespace}/{secret.name} changed while being created"
            )
    verdict = judge(existing, secret.key, api.namespace, adopt)
    if verdict is Verdict.ADOPT:
        _mark(api, http, secret, existing)
    return _outcome(api, secret, verdict.value)


def _outcome(api: InClusterApi, secret: GeneratedSecret, action: str) -> EnsureResult:
    """The result for ``secret``, logged (names only: the value never leaves the request)."""
    log_event(f"secrets.{action}", secret=secret.name, key=secret.key, namespace=api.namespace)
    return EnsureResult(secret.name, secret.key, action)


def _read(api: InClusterApi, http: httpx.Client, secret: GeneratedSecret) -> dict[str, Any] | None:
    """The Secret as the API server has it, or None when it does not exist."""
    response = _request(http, "GET", api.secrets_path(secret.name), secret)
    if response.status_code == 404:
        return None
    if response.status_code != 200:
        raise RuntimeFailure(
            f"cannot read Secret {api.namespace}/{secret.name}: {describe(response)}"
        )
    body: dict[str, Any] = response.json()
    return body


def _create(
    api: InClusterApi, http: httpx.Client, secret: GeneratedSecret, labels: Mapping[str, str]
) -> dict[str, Any] | None:
    """The Secret as created (its uid and resourceVersion), or None when one exists already."""
    response = _request(
        http,
        "POST",
        api.secrets_path(),
        secret,
        json=_manifest(secret, labels),
        params={"fieldManager": FIELD_MANAGER},
    )
    if response.status_code == 409:
        return None
    if response.status_code != 201:
        raise RuntimeFailure(
            f"cannot create Secret {api.namespace}/{secret.name}: {describe(response)}"
        )
    body: dict[str, Any] = response.json()
    return body


def _mark(
    api: InClusterApi, http: httpx.Client, secret: GeneratedSecret, seen: dict[str, Any]
) -> None:
    """Write ``seen``'s uid into its mark, only if it is still the object that was seen."""
    response = _request(
        http,
        "PATCH",
        api.secrets_path(secret.name),
        secret,
        json=mark_patch(seen),
        params={"fieldManager": FIELD_MANAGER},
        headers={"Content-Type": "application/merge-patch+json"},
    )
    if response.status_code in STALE:
        raise RuntimeFailure(
            f"Secret {api.namespace}/{secret.name} was changed or replaced while this Job "
            f"marked it ({describe(response)}): run the Job again"
        )
    if response.status_code != 200:
        raise RuntimeFailure(
            f"cannot mark Secret {api.namespace}/{secret.name} as the Job's: {describe(response)}"
        )


def _request(
    http: httpx.Client, method: str, path: str, secret: GeneratedSecret, **kwargs: Any
) -> httpx.Response:
    try:
        return http.request(method, path, **kwargs)
    except httpx.TransportError as exc:
        raise RuntimeFailure(
            f"Kubernetes API {http.base_url}{path} ({secret}): {exc} ({NETWORK_HINT})"
        ) from None
    except httpx.HTTPError as exc:
        raise RuntimeFailure(f"Kubernetes API {http.base_url}{path} ({secret}): {exc}") from None


def _manifest(secret: GeneratedSecret, labels: Mapping[str, str]) -> dict[str, Any]:
    value = secrets.token_urlsafe(GENERATED_BYTES)
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {
            "name": secret.name,
            "labels": {**labels, **MANAGED_BY},
            "annotations": {GENERATED_BY: "secrets-ensure"},
        },
        "type": "Opaque",
        "data": {secret.key: base64.b64encode(value.encode()).decode()},
    }
