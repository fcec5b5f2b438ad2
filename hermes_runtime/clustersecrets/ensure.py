"""Create each generated Secret that does not exist yet; never change one that does."""

from __future__ import annotations

import base64
import re
import secrets
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from typing import Any

import httpx

from hermes_runtime.clustersecrets.api import InClusterApi, describe
from hermes_runtime.common.errors import RuntimeFailure
from hermes_runtime.common.logs import log_event

# RFC 1123 subdomain (a Secret's name) and a Secret data key.
SECRET_NAME = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")
DATA_KEY = re.compile(r"^[-._a-zA-Z0-9]{1,253}$")
GENERATED_BYTES = 36  # 48 URL-safe characters, as the chart's randAlphaNum 48 gave
GENERATED_BY = "hermes-runtime/generated-by"


@dataclass(frozen=True)
class GeneratedSecret:
    """A Secret ``name`` whose ``key`` holds a random value made once, here."""

    name: str
    key: str

    def __str__(self) -> str:
        return f"{self.name}/{self.key}"


@dataclass(frozen=True)
class EnsureResult(GeneratedSecret):
    """What ``ensure`` found for a Secret: ``created`` False means it was there and kept."""

    created: bool

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
    api: InClusterApi, wanted: Iterable[GeneratedSecret], labels: Mapping[str, str]
) -> list[EnsureResult]:
    """Each wanted Secret exists with its key afterwards; only missing ones are created."""
    with api.client() as http:
        return [_ensure_one(api, http, secret, labels) for secret in wanted]


def _ensure_one(
    api: InClusterApi, http: httpx.Client, secret: GeneratedSecret, labels: Mapping[str, str]
) -> EnsureResult:
    if _existing_has_key(api, http, secret):
        return _outcome(api, secret, created=False)
    response = _request(http, "POST", api.secrets_path(), secret, json=_manifest(secret, labels))
    if response.status_code == 409:  # made meanwhile (a concurrent run): keep that one
        if _existing_has_key(api, http, secret):
            return _outcome(api, secret, created=False)
        raise RuntimeFailure(f"Secret {api.namespace}/{secret.name} changed while being created")
    if response.status_code != 201:
        raise RuntimeFailure(
            f"cannot create Secret {api.namespace}/{secret.name}: {describe(response)}"
        )
    return _outcome(api, secret, created=True)


def _outcome(api: InClusterApi, secret: GeneratedSecret, created: bool) -> EnsureResult:
    """The result for ``secret``, logged (names only: the value never leaves the request)."""
    log_event(
        "secrets.created" if created else "secrets.kept",
        secret=secret.name,
        key=secret.key,
        namespace=api.namespace,
    )
    return EnsureResult(secret.name, secret.key, created)


def _existing_has_key(api: InClusterApi, http: httpx.Client, secret: GeneratedSecret) -> bool:
    """True when the Secret exists with the key; False when it does not exist at all.

    One that exists without the key (or with an empty value) is someone else's: refused,
    never patched."""
    response = _request(http, "GET", api.secrets_path(secret.name), secret)
    if response.status_code == 404:
        return False
    if response.status_code != 200:
        raise RuntimeFailure(
            f"cannot read Secret {api.namespace}/{secret.name}: {describe(response)}"
        )
    data = response.json().get("data") or {}
    if not data.get(secret.key):
        raise RuntimeFailure(
            f"Secret {api.namespace}/{secret.name} exists without a value for key {secret.key!r}: "
            "add it, or delete the Secret to have one generated (never changed in place)"
        )
    return True


def _request(
    http: httpx.Client, method: str, path: str, secret: GeneratedSecret, **kwargs: Any
) -> httpx.Response:
    try:
        return http.request(method, path, **kwargs)
    except httpx.HTTPError as exc:
        raise RuntimeFailure(f"Kubernetes API {http.base_url}{path} ({secret}): {exc}") from None


def _manifest(secret: GeneratedSecret, labels: Mapping[str, str]) -> dict[str, Any]:
    value = secrets.token_urlsafe(GENERATED_BYTES)
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {
            "name": secret.name,
            "labels": dict(labels),
            "annotations": {GENERATED_BY: "secrets-ensure"},
        },
        "type": "Opaque",
        "data": {secret.key: base64.b64encode(value.encode()).decode()},
    }
