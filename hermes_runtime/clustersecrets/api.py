"""The Kubernetes API as a pod's own ServiceAccount sees it: read, create and mark a Secret.

Why not the ``kubernetes`` client: the agent image would carry it (and google-auth,
websocket-client, oauthlib, ...) for one GET, one POST and one PATCH, in the image whose
main process runs shell commands a model chose. httpx is already there; the calls are the
documented REST paths (``/api/v1/namespaces/{ns}/secrets``), authenticated with the projected
token and checked against the cluster's CA, as every in-cluster client does.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from hermes_runtime.common.envsettings import given_values
from hermes_runtime.common.errors import RuntimeFailure

SERVICE_ACCOUNT_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")
TIMEOUT_SECONDS = 10.0


class ApiServerAddress(BaseModel):
    """The API server's address, which the kubelet puts in every pod's environment."""

    model_config = ConfigDict(frozen=True)

    host: str = Field("", validation_alias="KUBERNETES_SERVICE_HOST")
    port: int = Field(443, ge=1, le=65535, validation_alias="KUBERNETES_SERVICE_PORT")

    @classmethod
    def from_environ(cls, env: Mapping[str, str]) -> ApiServerAddress:
        """The address ``env`` gives; a port that is not one is named."""
        given = given_values(cls, env)
        try:
            return cls.model_validate(given)
        except ValidationError:
            port = given.get("KUBERNETES_SERVICE_PORT")
            raise RuntimeFailure(f"KUBERNETES_SERVICE_PORT={port!r}: not a TCP port") from None


@dataclass(frozen=True)
class InClusterApi:
    """Where the API server is and how this pod authenticates to it."""

    base_url: str
    namespace: str
    token: str
    ca_file: Path

    @classmethod
    def from_service_account(
        cls, directory: Path = SERVICE_ACCOUNT_DIR, env: Mapping[str, str] | None = None
    ) -> InClusterApi:
        """The pod's ServiceAccount: the API server's address from ``env`` (the process's
        environment unless given) and the token files in ``directory``."""
        address = ApiServerAddress.from_environ(os.environ if env is None else env)
        if not address.host:
            raise RuntimeFailure(
                "KUBERNETES_SERVICE_HOST is not set: `secrets ensure` runs inside a pod "
                "(the chart's secrets Job)"
            )
        try:
            token = (directory / "token").read_text().strip()
            namespace = (directory / "namespace").read_text().strip()
        except OSError as exc:
            raise RuntimeFailure(
                f"{exc.filename}: {exc.strerror} (the pod needs its ServiceAccount token: "
                "automountServiceAccountToken)"
            ) from None
        host = f"[{address.host}]" if ":" in address.host else address.host
        return cls(f"https://{host}:{address.port}", namespace, token, directory / "ca.crt")

    def client(self) -> httpx.Client:
        return httpx.Client(
            base_url=self.base_url,
            headers={"Authorization": f"Bearer {self.token}"},
            verify=str(self.ca_file),
            timeout=TIMEOUT_SECONDS,
        )

    def secrets_path(self, name: str = "") -> str:
        path = f"/api/v1/namespaces/{self.namespace}/secrets"
        return f"{path}/{name}" if name else path


def describe(response: httpx.Response) -> str:
    """The API server's own reason (its Status message), else the HTTP status."""
    try:
        body: Any = response.json()
    except ValueError:
        body = None
    message = body.get("message") if isinstance(body, dict) else None
    return f"HTTP {response.status_code}" + (f": {message}" if message else "")
