"""Read secret paths and pick the requested fields.

KV v2 answers ``{"data": {"data": {...}, "metadata": {...}}}`` at
``MOUNT/data/NAME``; KV v1 and dynamic engines answer ``{"data": {...}}``.
Dynamic secrets (database credentials, certificates) come with a lease:
re-reading them would mint new credentials every tick, so the
:class:`SecretCache` renews their lease instead and re-reads only when Vault
will not extend it any further.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, TextIO

import hvac
import hvac.exceptions

from hermes_runtime.common.errors import RuntimeFailure
from hermes_runtime.common.logs import log_event
from hermes_runtime.vault.errors import CLIENT_EXCEPTIONS, describe_failure
from hermes_runtime.vault.spec import SecretSpec

KV2_HINT = "versioned K/V"


@dataclass(frozen=True)
class SecretRead:
    """The fields of one path plus its lease (empty ``lease_id`` for KV)."""

    path: str
    fields: dict[str, Any]
    lease_id: str = ""
    lease_duration: int = 0
    renewable: bool = False
    read_at: float = field(default_factory=time.monotonic)

    def lease_remaining(self) -> float:
        return self.lease_duration - (time.monotonic() - self.read_at)


def _kv2_fields(data: dict[str, Any]) -> dict[str, Any] | None:
    """The inner fields when ``data`` has the KV v2 shape, else None."""
    if set(data) == {"data", "metadata"} and isinstance(data["metadata"], dict):
        inner = data["data"]
        return dict(inner) if isinstance(inner, dict) else {}
    return None


def _missing_path_message(exc: BaseException, path: str, addr: str) -> str:
    body = json.dumps(getattr(exc, "json", None) or {})
    message = f"secret path {path!r} not found at {addr}"
    if KV2_HINT in body:
        mount, _, rest = path.partition("/")
        message += f" ({mount!r} is a KV v2 mount: use '{mount}/data/{rest}')"
    return message


def read_secret(client: hvac.Client, path: str, addr: str) -> SecretRead:
    """GET ``/v1/PATH``; failures name the path and address, never content."""
    try:
        response = client.adapter.get(f"/v1/{path}")
    except hvac.exceptions.InvalidPath as exc:
        raise RuntimeFailure(_missing_path_message(exc, path, addr)) from None
    except CLIENT_EXCEPTIONS as exc:
        raise describe_failure(exc, addr, f"reading secret path {path!r}") from None
    data = response.get("data") if isinstance(response, dict) else None
    if not isinstance(data, dict):
        raise RuntimeFailure(f"secret path {path!r} at {addr} returned no data")
    kv2 = _kv2_fields(data)
    if kv2 is not None and not kv2:
        raise RuntimeFailure(f"secret path {path!r} at {addr}: the current version is deleted")
    return SecretRead(
        path=path,
        fields=kv2 if kv2 is not None else dict(data),
        lease_id=str(response.get("lease_id") or ""),
        lease_duration=int(response.get("lease_duration") or 0),
        renewable=bool(response.get("renewable")),
    )


def field_as_text(value: Any) -> str:
    """Strings as they are; numbers, booleans, lists and objects as JSON."""
    return value if isinstance(value, str) else json.dumps(value, separators=(",", ":"))


def pick_values(
    specs: Iterable[SecretSpec], reads: dict[str, SecretRead], addr: str
) -> dict[str, str]:
    """Map each spec's field to its variable; a missing key names path, key and the known fields."""
    values: dict[str, str] = {}
    for spec in specs:
        fields = reads[spec.path].fields
        if spec.key not in fields:
            known = ", ".join(sorted(fields)) or "none"
            raise RuntimeFailure(
                f"key {spec.key!r} not found in secret path {spec.path!r} at {addr} "
                f"(fields: {known})"
            )
        if fields[spec.key] is None:
            raise RuntimeFailure(f"key {spec.key!r} in secret path {spec.path!r} at {addr} is null")
        values[spec.env] = field_as_text(fields[spec.key])
    return values


@dataclass
class SecretCache:
    """Per-path reads kept across refresh ticks so leased secrets are renewed, not re-minted."""

    reads: dict[str, SecretRead] = field(default_factory=dict)
    log: TextIO | None = None

    def fetch(
        self, client: hvac.Client, specs: list[SecretSpec], addr: str, interval: float = 0
    ) -> dict[str, str]:
        """Values for ``specs``: KV paths re-read each call, leased paths renewed while possible."""
        for path in dict.fromkeys(spec.path for spec in specs):
            cached = self.reads.get(path)
            if (
                cached is not None
                and cached.lease_id
                and self._keep_lease(client, cached, interval)
            ):
                continue
            self.reads[path] = read_secret(client, path, addr)
            if cached is not None and cached.lease_id:
                log_event("vault.lease.reread", self.log, path=path)
        return pick_values(specs, self.reads, addr)

    def _keep_lease(self, client: hvac.Client, cached: SecretRead, interval: float) -> bool:
        """Renew ``cached``'s lease when it runs low; False means read the path again."""
        margin = max(3 * interval, cached.lease_duration / 3)
        if cached.lease_remaining() > margin:
            return True
        if not cached.renewable:
            return False
        try:
            renewed = client.sys.renew_lease(
                lease_id=cached.lease_id, increment=cached.lease_duration
            )
        except CLIENT_EXCEPTIONS:
            return False
        duration = int(renewed.get("lease_duration") or 0)
        if duration <= margin:
            return False
        self.reads[cached.path] = SecretRead(
            cached.path, cached.fields, cached.lease_id, duration, bool(renewed.get("renewable"))
        )
        log_event("vault.lease.renewed", self.log, path=cached.path, ttl=duration)
        return True
