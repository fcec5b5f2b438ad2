"""Turn hvac/requests exceptions into messages an operator can act on.

Why not ``str(exc)``: hvac puts whole response bodies into its messages. We
keep only Vault's own error strings (which never carry secret data) and
always name the address plus the path, role or file at fault.
"""

from __future__ import annotations

import hvac.exceptions
import requests

from hermes_runtime.common.errors import RuntimeFailure


def vault_errors(exc: BaseException) -> str:
    """Vault's error strings from an hvac exception, joined; empty when it sent none."""
    errors = getattr(exc, "errors", None)
    if isinstance(errors, list) and errors:
        return "; ".join(str(item) for item in errors)
    return ""


def transport_failure(exc: requests.RequestException, addr: str) -> RuntimeFailure | None:
    """A connection/TLS/timeout problem, or None when ``exc`` is something else."""
    if isinstance(
        exc,
        (
            requests.exceptions.InvalidSchema,
            requests.exceptions.InvalidURL,
            requests.exceptions.MissingSchema,
        ),
    ):
        return RuntimeFailure(
            f"Vault address {addr!r} is not a URL: expected http:// or https://, "
            "e.g. https://vault.example:8200"
        )
    if isinstance(exc, requests.exceptions.SSLError):
        return RuntimeFailure(
            f"TLS verification failed for Vault at {addr}: pass the CA with --ca-cert "
            "(chart value vault.caSecret)"
        )
    if isinstance(exc, requests.exceptions.Timeout):
        return RuntimeFailure(f"Vault at {addr} did not answer in time")
    if isinstance(exc, requests.exceptions.ConnectionError):
        return RuntimeFailure(f"cannot reach Vault at {addr} (connection failed)")
    return None


def describe_failure(exc: BaseException, addr: str, action: str) -> RuntimeFailure:
    """Map any client-side exception raised while doing ``action`` to a RuntimeFailure."""
    if isinstance(exc, requests.RequestException):
        transport = transport_failure(exc, addr)
        if transport is not None:
            return transport
    detail = vault_errors(exc)
    suffix = f": {detail}" if detail and detail != "permission denied" else ""
    if isinstance(exc, hvac.exceptions.VaultDown):
        return RuntimeFailure(f"Vault at {addr} is sealed or down while {action}{suffix}")
    if isinstance(exc, hvac.exceptions.Forbidden):
        return RuntimeFailure(f"Vault at {addr} denied {action} (permission denied){suffix}")
    if isinstance(exc, hvac.exceptions.Unauthorized):
        return RuntimeFailure(f"Vault at {addr} refused {action} (unauthorized){suffix}")
    if isinstance(exc, hvac.exceptions.InvalidPath):
        return RuntimeFailure(f"Vault at {addr}: nothing found while {action}{suffix}")
    if isinstance(exc, hvac.exceptions.VaultError):
        return RuntimeFailure(f"Vault at {addr} failed {action}{suffix}")
    return RuntimeFailure(f"unexpected {type(exc).__name__} from Vault at {addr} while {action}")


CLIENT_EXCEPTIONS = (hvac.exceptions.VaultError, requests.RequestException)
