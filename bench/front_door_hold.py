"""Benchmark: what the front door costs while it holds clients for a gateway that is down.

Usage:
    .venv/bin/python bench/front_door_hold.py [--held 256] [--seconds 5]

The real ``FrontDoor`` runs in a child process (its own event loop, as in the entrypoint),
forwarding to a loopback port where nothing listens yet: a gateway being restarted. The
parent opens ``--held`` client connections, each sending a request head, waits until the
door holds them all, then reads the child's CPU time (``/proc/<pid>/stat``) over
``--seconds``. Then a listener opens on the gateway's port and the bench times how long
until every held client is forwarded. Prints one JSON document: the door's cores busy while
holding, the wake-up time, and the same cores with nothing held for comparison.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import subprocess
import sys
import time

import runinfo

HEAD = b"GET /health HTTP/1.1\r\nHost: bench\r\n\r\n"
TICKS = os.sysconf("SC_CLK_TCK")
DOOR = """
import asyncio, sys
from hermes_runtime.agent.frontdoor import DoorPolicy, FrontDoor
from hermes_runtime.agent.handover import GATEWAY

async def main() -> None:
    door = FrontDoor(("127.0.0.1", 0), ("127.0.0.1", int(sys.argv[1])),
                     lambda: GATEWAY, policy=DoorPolicy(hold_seconds=600, max_held=100000))
    await door.start()
    print(door.port, flush=True)
    while True:
        await asyncio.sleep(0.2)
        print(door.held, flush=True)

asyncio.run(main())
"""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS  # utime, stime


def door_cores(pid: int, seconds: float) -> float:
    before = cpu_seconds(pid)
    time.sleep(seconds)
    return round((cpu_seconds(pid) - before) / seconds, 3)


def wait_held(door: subprocess.Popen[str], count: int) -> None:
    assert door.stdout is not None
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if int(door.stdout.readline()) >= count:
            return
    raise SystemExit(f"the door held fewer than {count} connections after 60 s")


def time_to_forward_all(gateway_port: int, clients: list[socket.socket]) -> float:
    """Open the gateway's port; seconds until every held client's head reached it."""

    async def serve() -> float:
        arrived = 0
        everyone = asyncio.Event()

        async def on_client(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            nonlocal arrived
            if await reader.read(len(HEAD)):
                arrived += 1
                if arrived == len(clients):
                    everyone.set()
            writer.close()

        opened = time.monotonic()
        server = await asyncio.start_server(on_client, "127.0.0.1", gateway_port, backlog=4096)
        await asyncio.wait_for(everyone.wait(), 60)
        server.close()
        return time.monotonic() - opened

    return round(asyncio.run(serve()), 3)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--held", type=int, default=256, help="clients held (default 256)")
    parser.add_argument("--seconds", type=float, default=5.0, help="CPU window (default 5)")
    args = parser.parse_args()
    if args.held < 1 or args.seconds <= 0:
        parser.error("--held must be 1 or more and --seconds above 0")
    runinfo.announce()
    gateway_port = free_port()
    door = subprocess.Popen(
        [sys.executable, "-c", DOOR, str(gateway_port)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert door.stdout is not None
        port = int(door.stdout.readline())
        idle = door_cores(door.pid, args.seconds)
        clients = [socket.create_connection(("127.0.0.1", port)) for _ in range(args.held)]
        for client in clients:
            client.sendall(HEAD)
        wait_held(door, args.held)
        holding = door_cores(door.pid, args.seconds)
        wake = time_to_forward_all(gateway_port, clients)
    finally:
        door.kill()
    result = {
        "held": args.held,
        "door_cores_nothing_held": idle,
        "door_cores_while_holding": holding,
        "seconds_to_forward_all_once_the_port_opens": wake,
    }
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
