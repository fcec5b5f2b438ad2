"""The entrypoint's control socket: the one way to start the pod's stop from outside the process.

Why not an HTTP path: the agent's ports (API, metrics) are reachable from every pod of the
cluster unless a NetworkPolicy says otherwise, and from every container of this pod in any
case (they share one network namespace, loopback included; git-sync is a third-party image).
A ``GET /pre-stop`` on the metrics port was enough, from any of them, to turn the pod unready
for good. So the ports only read (``endpoints.py``), and the stop is asked for here:

- a Unix socket in a directory only the agent container mounts (the chart's ``control``
  emptyDir at ``/run/hermes-runtime``; not ``/tmp``, which other containers of the pod
  mount, and not the data volume, which git-sync writes to). A path socket, never an
  abstract one: abstract sockets belong to the network namespace, which the whole pod shares.
- the socket file is made ``0600`` before it exists (``fchmod`` before ``bind``), and a
  peer whose UID (``SO_PEERCRED``) is not ours is refused and logged.
- the kubelet's preStop hook is an ``exec`` of ``hermes-runtime agent pre-stop``
  (``hook.py``), which only the kubelet (or someone who may already exec into the container)
  can run.

Protocol: one line, the command (``pre-stop``); one JSON line back. Served on the entrypoint's
event loop; a command is a coroutine (``pre-stop`` is ``HandOver.pre_stop``, which holds its
caller until the hand-over's wait ends).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import socket
import stat
import struct
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any

from hermes_runtime.common.errors import RuntimeFailure
from hermes_runtime.common.logs import log_event

READ_SECONDS = 5.0  # for the command line; the answer may take the hand-over's wait
MAX_COMMAND = 64
Command = Callable[[], Awaitable[dict[str, Any]]]


class ControlServer:
    """Serve ``commands`` on the Unix socket ``path``; ``start`` binds, ``stop`` removes it."""

    def __init__(self, path: Path, commands: Mapping[str, Command]) -> None:
        self.path = path
        self._commands = dict(commands)
        self._server: asyncio.Server | None = None
        self._inode: int | None = None

    async def start(self) -> None:
        """Bind (replacing a socket a previous container left) and serve on the loop."""
        _clear_stale(self.path)
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            os.fchmod(sock.fileno(), 0o600)  # the file is born 0600 (Linux)
            sock.bind(str(self.path))
            self._server = await asyncio.start_unix_server(self._handle, sock=sock)
        except OSError:
            sock.close()
            raise
        self._inode = self.path.stat().st_ino
        log_event("agent.control.listening", socket=str(self.path))

    async def stop(self) -> None:
        server = self._server
        if server is None:
            return
        server.close()
        with contextlib.suppress(OSError):  # gone already, or replaced: not ours to remove
            if self.path.stat().st_ino == self._inode:
                self.path.unlink()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            answer = await self._answer(reader, writer.get_extra_info("socket"))
            if answer is not None:
                writer.write(json.dumps(answer).encode() + b"\n")
                await writer.drain()
        except OSError:
            pass  # the hook gave up (the kubelet's grace period ended): nothing to tell
        finally:
            writer.close()

    async def _answer(self, reader: asyncio.StreamReader, sock: Any) -> dict[str, Any] | None:
        """The answer to the peer's command; None: nothing to answer (refused, or silent)."""
        pid, uid = _peer(sock)
        if uid != os.getuid():
            log_event("agent.control.refused", level="warning", peer_uid=uid, peer_pid=pid)
            return None
        try:
            line = await asyncio.wait_for(reader.readline(), READ_SECONDS)
        except (TimeoutError, ValueError):  # silent, or a line past the stream's limit
            return None
        command = line[:MAX_COMMAND].decode("utf-8", errors="replace").strip()
        run = self._commands.get(command)
        log_event("agent.control.command", command=command, peer_pid=pid)
        if run is None:
            known = ", ".join(sorted(self._commands))
            return {"error": f"unknown command {command!r} (known: {known})"}
        try:
            return await run()
        except Exception as exc:  # a bug: answer and log it, never end the entrypoint for it
            log_event("agent.control.failed", level="error", command=command, error=repr(exc))
            return {"error": f"{command} failed: {type(exc).__name__}"}


def _peer(conn: Any) -> tuple[int, int]:
    """``(pid, uid)`` of the process on the other end (Linux ``SO_PEERCRED``)."""
    raw = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    pid, uid, _gid = struct.unpack("3i", raw)
    return pid, uid


def _clear_stale(path: Path) -> None:
    """A socket at ``path`` is a previous container's (the emptyDir outlives it): remove it.
    Anything else there is a mistake in the settings, refused by name."""
    try:
        mode = path.lstat().st_mode
    except FileNotFoundError:
        return
    if not stat.S_ISSOCK(mode):
        raise RuntimeFailure(
            f"control socket {path} (HERMES_RUNTIME_CONTROL_SOCKET) exists and is no socket"
        )
    path.unlink()
