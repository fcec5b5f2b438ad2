"""The preStop hook's end of the control socket: ``hermes-runtime agent pre-stop``.

The kubelet runs the hook (an ``exec`` action) in the agent container each time the pod
stops; it connects to the running entrypoint's Unix socket (``control.py``), asks for the
hand-over, and waits for the answer: the entrypoint answers once its warm successor waits or
``handover_seconds`` passed, and the kubelet sends SIGTERM when the hook exits.

A fresh interpreter on the stop's critical path, so this module imports only the standard
library (no Prometheus, Vault client or Rich: the CLI handler imports it alone).

Nothing listening there (an entrypoint still waiting for the data dir lock, or one that
already exited, or a socket left by a previous container) is no error: there is nothing to
hand over, and the kubelet's SIGTERM stops the pod anyway. The caller reports it and exits 0.
"""

from __future__ import annotations

import json
import socket
from pathlib import Path
from typing import Any

from hermes_runtime.common.errors import RuntimeFailure

PRE_STOP = "pre-stop"
CONNECT_SECONDS = 5.0
# The entrypoint answers pre-stop within its hand-over wait; the kubelet bounds the hook anyway.
ANSWER_MARGIN_SECONDS = 30.0
MAX_ANSWER = 64 * 1024


def ask_entrypoint(path: Path, command: str, timeout: float) -> dict[str, Any] | None:
    """The entrypoint's answer to ``command``, waiting up to ``timeout`` seconds for it.

    None when nothing listens at ``path`` (no socket, or a stale one). A socket we may not
    use, an answer that does not come in time or is not JSON: ``RuntimeFailure`` naming it."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(CONNECT_SECONDS)
        try:
            sock.connect(str(path))
        except (FileNotFoundError, ConnectionRefusedError, TimeoutError):
            return None
        except OSError as exc:
            raise RuntimeFailure(
                f"control socket {path} (HERMES_RUNTIME_CONTROL_SOCKET): {exc.strerror or exc}"
            ) from None
        sock.settimeout(timeout)
        try:
            sock.sendall(command.encode() + b"\n")
            answer = _read_line(sock)
        except TimeoutError:
            raise RuntimeFailure(
                f"control socket {path}: no answer to {command} within {timeout:g} s"
            ) from None
        except OSError as exc:
            raise RuntimeFailure(f"control socket {path}: {exc.strerror or exc}") from None
    try:
        parsed = json.loads(answer)
    except ValueError:
        parsed = None
    if not isinstance(parsed, dict):
        raise RuntimeFailure(f"control socket {path}: the answer to {command} is no JSON object")
    return parsed


def _read_line(sock: socket.socket) -> bytes:
    data = b""
    while not data.endswith(b"\n") and len(data) <= MAX_ANSWER:
        chunk = sock.recv(4096)
        if not chunk:
            break
        data += chunk
    return data
