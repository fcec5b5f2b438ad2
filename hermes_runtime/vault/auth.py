"""Log in to Vault/OpenBao and keep the token alive.

Three methods: ``kubernetes`` (the pod's projected ServiceAccount token),
``token`` (``VAULT_TOKEN`` from the environment, never an argument) and
``approle`` (role id and secret id read from files, e.g. a mounted Secret).
A :class:`Session` remembers when its token expires so the refresher can
renew it, or log in again when renewal stops working (max TTL reached,
token revoked, projected JWT rotated).
"""

from __future__ import annotations

import base64
import binascii
import json
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import hvac
import hvac.exceptions

from hermes_runtime.common.errors import RuntimeFailure
from hermes_runtime.vault.errors import CLIENT_EXCEPTIONS, describe_failure

AuthMethod = Literal["kubernetes", "token", "approle"]
AUTH_METHODS: tuple[AuthMethod, ...] = ("kubernetes", "token", "approle")
DEFAULT_JWT_FILE = Path("/var/run/secrets/kubernetes.io/serviceaccount/token")
TOKEN_ENV = "VAULT_TOKEN"
KUBERNETES_DENIED_HINT = (
    "check that the auth method is enabled at that path, that the role binds this "
    "ServiceAccount and namespace, and that Vault can reach the TokenReview API"
)


@dataclass(frozen=True)
class VaultSettings:
    """Where and how to log in. Holds file paths and names only, never a credential."""

    addr: str
    auth: AuthMethod
    role: str | None = None
    auth_path: str | None = None
    audience: str | None = None
    ca_cert: Path | None = None
    jwt_file: Path = DEFAULT_JWT_FILE
    role_id_file: Path | None = None
    secret_id_file: Path | None = None
    timeout: float = 10.0

    @property
    def mount(self) -> str:
        """The auth method's mount (``kubernetes`` unless ``--auth-path`` says otherwise)."""
        return (self.auth_path or self.auth).strip("/").removeprefix("auth/")

    def can_login_again(self) -> bool:
        return self.auth in ("kubernetes", "approle")


@dataclass
class Session:
    """A logged-in client plus what is needed to keep its token valid."""

    settings: VaultSettings
    client: hvac.Client
    ttl: int
    renewable: bool
    obtained_at: float = field(default_factory=time.monotonic)

    def remaining(self) -> float:
        """Seconds of token life left; infinity for a token without expiry (root, periodic 0)."""
        if self.ttl <= 0:
            return float("inf")
        return self.ttl - (time.monotonic() - self.obtained_at)


def new_client(settings: VaultSettings, token: str = "") -> hvac.Client:
    """An hvac client that ignores ~/.vault-token and VAULT_TOKEN unless we pass one."""
    verify: bool | str = str(settings.ca_cert) if settings.ca_cert else True
    if settings.ca_cert and not settings.ca_cert.is_file():
        raise RuntimeFailure(f"--ca-cert file {settings.ca_cert} does not exist")
    return hvac.Client(url=settings.addr, token=token, verify=verify, timeout=settings.timeout)


def read_credential_file(path: Path, what: str) -> str:
    """Read a token/id file; the message names the file, never its content."""
    try:
        value = Path(path).read_text(encoding="utf-8").strip()
    except FileNotFoundError:
        raise RuntimeFailure(f"{what} file {path} does not exist") from None
    except OSError as exc:
        raise RuntimeFailure(f"cannot read {what} file {path}: {exc.strerror}") from None
    if not value:
        raise RuntimeFailure(f"{what} file {path} is empty")
    return value


def jwt_audiences(jwt: str) -> list[str]:
    """The ``aud`` claim of a JWT, read without verifying it (Vault verifies it)."""
    try:
        payload_b64 = jwt.split(".")[1]
        payload = json.loads(base64.urlsafe_b64decode(payload_b64 + "=" * (-len(payload_b64) % 4)))
    except (IndexError, ValueError, binascii.Error):
        raise ValueError("not a JWT") from None
    audience = payload.get("aud", []) if isinstance(payload, dict) else []
    return [audience] if isinstance(audience, str) else [str(item) for item in audience]


def _kubernetes_login(settings: VaultSettings, client: hvac.Client) -> dict[str, Any]:
    jwt = read_credential_file(settings.jwt_file, "ServiceAccount token")
    if settings.audience:
        try:
            audiences = jwt_audiences(jwt)
        except ValueError:
            raise RuntimeFailure(
                f"ServiceAccount token file {settings.jwt_file} is not a JWT"
            ) from None
        if settings.audience not in audiences:
            raise RuntimeFailure(
                f"ServiceAccount token {settings.jwt_file} has audience {audiences}, "
                f"not {settings.audience!r} (--audience); project the token with that audience"
            )
    action = f"kubernetes login for role {settings.role!r} at auth path 'auth/{settings.mount}'"
    try:
        return dict(
            client.auth.kubernetes.login(role=settings.role, jwt=jwt, mount_point=settings.mount)
        )
    except CLIENT_EXCEPTIONS as exc:
        failure = describe_failure(exc, settings.addr, action)
        if isinstance(exc, hvac.exceptions.Forbidden):
            failure = RuntimeFailure(f"{failure}; {KUBERNETES_DENIED_HINT}")
        raise failure from None


def _approle_login(settings: VaultSettings, client: hvac.Client) -> dict[str, Any]:
    if settings.role_id_file is None or settings.secret_id_file is None:
        raise RuntimeFailure("--auth approle needs --role-id-file and --secret-id-file")
    role_id = read_credential_file(settings.role_id_file, "AppRole role id")
    secret_id = read_credential_file(settings.secret_id_file, "AppRole secret id")
    action = (
        f"approle login at auth path 'auth/{settings.mount}' "
        f"(role id from {settings.role_id_file}, secret id from {settings.secret_id_file})"
    )
    try:
        return dict(
            client.auth.approle.login(
                role_id=role_id, secret_id=secret_id, mount_point=settings.mount
            )
        )
    except CLIENT_EXCEPTIONS as exc:
        raise describe_failure(exc, settings.addr, action) from None


def _token_session(settings: VaultSettings, environ: Mapping[str, str]) -> Session:
    token = environ.get(TOKEN_ENV, "").strip()
    if not token:
        raise RuntimeFailure(f"--auth token reads the token from {TOKEN_ENV}, which is not set")
    client = new_client(settings, token)
    try:
        data = client.auth.token.lookup_self()["data"]
    except CLIENT_EXCEPTIONS as exc:
        raise describe_failure(
            exc, settings.addr, f"the token from {TOKEN_ENV} (token lookup)"
        ) from None
    return Session(
        settings, client, ttl=int(data.get("ttl") or 0), renewable=bool(data.get("renewable"))
    )


def login(settings: VaultSettings, environ: Mapping[str, str]) -> Session:
    """Authenticate with ``settings.auth``; raise RuntimeFailure naming what was refused."""
    if settings.auth == "token":
        return _token_session(settings, environ)
    client = new_client(settings)
    if settings.auth == "kubernetes":
        if not settings.role:
            raise RuntimeFailure("--auth kubernetes needs --role")
        response = _kubernetes_login(settings, client)
    elif settings.auth == "approle":
        response = _approle_login(settings, client)
    else:
        raise RuntimeFailure(f"--auth {settings.auth!r} is not one of {', '.join(AUTH_METHODS)}")
    auth = response.get("auth") or {}
    client.token = auth.get("client_token", "")
    return Session(
        settings,
        client,
        ttl=int(auth.get("lease_duration") or 0),
        renewable=bool(auth.get("renewable")),
    )


def renew_threshold(base_ttl: int, interval: float) -> float:
    """Renew when this many seconds are left: a third of the TTL, at least two intervals,
    but never more than two thirds (else a short TTL would renew on every tick)."""
    return min(max(2 * interval, base_ttl / 3), base_ttl * 2 / 3)


def renew_token(session: Session) -> bool:
    """Try ``renew-self``; True when the token got a longer life."""
    try:
        auth = session.client.auth.token.renew_self()["auth"]
    except CLIENT_EXCEPTIONS:
        return False
    session.ttl = int(auth.get("lease_duration") or 0)
    session.renewable = bool(auth.get("renewable"))
    session.obtained_at = time.monotonic()
    return True


@dataclass
class TokenKeeper:
    """Keeps one session's token valid across refresh ticks."""

    session: Session
    environ: Mapping[str, str]
    interval: float
    base_ttl: int = 0

    def __post_init__(self) -> None:
        self.base_ttl = self.session.ttl

    def ensure_fresh(self) -> str | None:
        """Renew or log in again when the token is close to expiry; return what was done."""
        if self.base_ttl <= 0:
            return None
        threshold = renew_threshold(self.base_ttl, self.interval)
        if self.session.remaining() > threshold:
            return None
        if (
            self.session.renewable
            and renew_token(self.session)
            and self.session.remaining() > threshold
        ):
            return "renewed"
        if not self.session.settings.can_login_again():
            return "expiring"
        self.relogin()
        return "relogin"

    def relogin(self) -> None:
        """A fresh login (the projected JWT may have rotated); keeps the same settings."""
        self.session = login(self.session.settings, self.environ)
        self.base_ttl = self.session.ttl
