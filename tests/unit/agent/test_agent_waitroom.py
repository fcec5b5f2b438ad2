"""The wait room: connections the front door holds share one watcher of the route and port.

Real sockets: the gateway's port is a real loopback port that refuses (nobody listens) and
then a real listener; the route is a plain value the test sets, as the supervisor's state
would. The only thing added is a count of knocks around the real ``asyncio.open_connection``.
"""

from __future__ import annotations

import asyncio
import contextlib
import time

from support.net import free_port

from hermes_runtime.agent.handover import CLOSE, GATEWAY, HOLD, Route
from hermes_runtime.agent.waitroom import Connection, WaitRoom

INTERVAL = 0.02
WAITERS = 50


class Gateway:
    """The route the room asks, and the gateway's port, knocked on with a count."""

    def __init__(self, route: Route = GATEWAY) -> None:
        self.port = free_port()
        self.now = route
        self.knocks = 0

    def route(self) -> Route:
        return self.now

    async def knock(self) -> Connection:
        self.knocks += 1
        return await asyncio.open_connection("127.0.0.1", self.port)

    def room(self) -> WaitRoom:
        return WaitRoom(self.route, self.knock, INTERVAL)


async def listener(port: int, accepted: list[int]) -> asyncio.Server:
    def on_accept(_reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        accepted.append(1)
        writer.close()

    return await asyncio.start_server(on_accept, "127.0.0.1", port)


async def connect_like_the_door(room: WaitRoom, port: int, until: float) -> Connection | None:
    """What the front door does for a held client: wait, connect, say when that failed."""
    while (route := await room.wait(until)) is not None:
        if route.kind != "gateway":
            return None
        try:
            return await asyncio.open_connection("127.0.0.1", port)
        except OSError:
            room.failed()
    return None


def close_all(connections: list[Connection | None]) -> None:
    for connection in connections:
        if connection is not None:
            with contextlib.suppress(OSError):
                connection[1].close()


def test_held_clients_share_one_knock_while_the_port_refuses() -> None:
    async def scenario() -> tuple[list[Route | None], int, float, int, int]:
        gateway = Gateway()
        room = gateway.room()
        started = time.monotonic()
        routes = await asyncio.gather(*(room.wait(started + 0.5) for _ in range(WAITERS)))
        elapsed, knocks = time.monotonic() - started, gateway.knocks
        await asyncio.sleep(10 * INTERVAL)  # nobody waits now: the watcher must have stopped
        return routes, knocks, elapsed, room.waiting, gateway.knocks - knocks

    routes, knocks, elapsed, waiting, knocks_after = asyncio.run(scenario())
    assert routes == [None] * WAITERS  # nobody listened within the time: nowhere to go
    # One knock per interval (a refused knock sleeps one interval), however many wait; one
    # knock per client per interval would be WAITERS times as many.
    assert 1 <= knocks <= elapsed / INTERVAL + 2, knocks
    assert waiting == 0
    assert knocks_after <= 1  # at most the round under way when the last waiter left


def test_when_the_port_opens_every_held_client_gets_its_own_connection() -> None:
    async def scenario() -> tuple[list[Connection | None], list[int], int]:
        gateway = Gateway()
        room = gateway.room()
        until = time.monotonic() + 10
        held = [
            asyncio.ensure_future(connect_like_the_door(room, gateway.port, until))
            for _ in range(WAITERS)
        ]
        await asyncio.sleep(0.3)  # all held, the port still refusing
        accepted: list[int] = []
        server = await listener(gateway.port, accepted)
        connections = await asyncio.gather(*held)
        await asyncio.sleep(0.1)  # let the listener run its accept callbacks
        server.close()
        close_all(connections)
        return connections, accepted, gateway.knocks

    connections, accepted, knocks = asyncio.run(scenario())
    assert all(connection is not None for connection in connections)
    # Each held client opened its own connection; the knock that found the port open is
    # the one more the listener saw (and closed at once).
    assert len(accepted) == WAITERS + 1
    assert knocks < WAITERS  # the refused knocks were shared, not one per client


def test_a_route_that_changes_wakes_every_waiter_without_a_knock() -> None:
    async def scenario() -> tuple[list[Route | None], int, float]:
        gateway = Gateway(HOLD)  # the gateway being replaced: wait, nobody knocks
        room = gateway.room()
        held = [asyncio.ensure_future(room.wait(time.monotonic() + 10)) for _ in range(WAITERS)]
        await asyncio.sleep(0.3)
        changed = time.monotonic()
        gateway.now = CLOSE  # the pod goes away
        routes = await asyncio.gather(*held)
        return routes, gateway.knocks, time.monotonic() - changed

    routes, knocks, woken_after = asyncio.run(scenario())
    assert routes == [CLOSE] * WAITERS
    assert knocks == 0  # while the route said hold, the gateway's port was left alone
    assert woken_after < 5  # within the watcher's next look, far before the hold time


def test_a_port_that_closes_again_is_watched_again() -> None:
    async def scenario() -> tuple[Connection | None, Connection | None, Connection | None]:
        gateway = Gateway()
        room = gateway.room()
        accepted: list[int] = []
        server = await listener(gateway.port, accepted)
        first = await connect_like_the_door(room, gateway.port, time.monotonic() + 5)
        close_all([first])
        server.close()
        await server.wait_closed()
        gone = await connect_like_the_door(room, gateway.port, time.monotonic() + 0.3)
        server = await listener(gateway.port, accepted)
        back = await connect_like_the_door(room, gateway.port, time.monotonic() + 5)
        server.close()
        close_all([back])
        return first, gone, back

    first, gone, back = asyncio.run(scenario())
    assert first is not None
    assert gone is None  # the port closed: the room's earlier "go" let nobody through
    assert back is not None  # and the watcher knocked until it opened again


def test_a_refused_route_is_tried_again_once_an_interval_not_in_a_loop() -> None:
    async def scenario() -> tuple[int, float]:
        gateway = Gateway(Route("relay", ("127.0.0.1", free_port())))  # a successor not up
        room = gateway.room()
        tries = 0
        started = time.monotonic()
        while await room.wait(started + 0.5) is not None:
            tries += 1  # the door's relay connect, refused
            room.failed()
        return tries, time.monotonic() - started

    tries, elapsed = asyncio.run(scenario())
    assert 1 <= tries <= elapsed / INTERVAL + 2, tries
