"""Network helpers shared by the test servers (SeaweedFS, OpenBao, the agent, Hermes gateways).

Ports are picked below the kernel's range for outgoing connections
(``net.ipv4.ip_local_port_range``): a port the kernel handed out with ``bind(0)`` sits in
that range, and any ``connect()`` on the machine (a Docker pull, another worker's client)
can take it between the pick and the server's own bind. Below the range only servers
that choose their port, like these, compete; each pick is random, so two workers rarely meet.
"""

from __future__ import annotations

import random
import socket
from pathlib import Path

LOWEST_PORT = 10000
EPHEMERAL_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")
ATTEMPTS = 1000


def first_ephemeral_port() -> int:
    """The lowest port the kernel hands out for outgoing connections (32768 unless tuned)."""
    try:
        return int(EPHEMERAL_RANGE.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def port_is_free(port: int) -> bool:
    """Whether ``port`` on loopback can be bound right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_port(twin_offset: int = 0, taken: frozenset[int] = frozenset()) -> int:
    """A loopback port free right now, below the outgoing range; the caller binds it soon.

    With ``twin_offset`` the port ``port + twin_offset`` is free and below the range too
    (SeaweedFS listens for gRPC on its port + 10000). Ports in ``taken`` are never returned.
    """
    highest = first_ephemeral_port() - 1 - twin_offset
    if highest <= LOWEST_PORT:
        raise RuntimeError(f"no port range below {EPHEMERAL_RANGE}'s {highest + twin_offset + 1}")
    pick = random.SystemRandom()
    for _ in range(ATTEMPTS):
        port = pick.randint(LOWEST_PORT, highest)
        wanted = {port, port + twin_offset}
        if wanted & taken or not all(port_is_free(each) for each in wanted):
            continue
        return port
    raise RuntimeError(f"no free port between {LOWEST_PORT} and {highest}")
