"""Where the front door's held connections wait: one watcher for all of them.

Rule: a held connection neither polls the route nor knocks on the gateway's port itself. One
task, running while anyone waits, asks the route and knocks on the port every ``interval``;
when the route leads somewhere (the gateway's port accepted a knock, a successor to relay
to, or ``close``) it wakes every waiter at once, and each then opens its own connection.
A waiter whose connection fails (the gateway went away again) says so, and the watcher
starts over. The knock's own connection is closed at once: handed to a waiter later, it
could reach a gateway that had closed it meanwhile.

Why: a port that starts to listen sends no event, so someone must poll it. If each held
connection polled on its own, the hundreds held during a restart would cost hundreds of
refused connects and timer wake-ups per interval, on the same event loop that accepts new
clients, beside a gateway process that needs the CPU to start. One watcher costs one connect
per interval however many wait, and a waiter still learns within one interval where to go.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable

from hermes_runtime.agent.handover import Route

Connection = tuple[asyncio.StreamReader, asyncio.StreamWriter]
Connect = Callable[[], Awaitable[Connection]]


class WaitRoom:
    """``wait(until)``: the route to take once it leads somewhere, or None at ``until``
    (monotonic). Lives on one event loop."""

    def __init__(self, route: Callable[[], Route], knock: Connect, interval: float) -> None:
        self._route = route
        self._knock = knock  # a connection to the gateway's port
        self._interval = interval
        self._go = asyncio.Event()  # set: the route led somewhere at the watcher's last look
        self._waiting = 0
        self._quiet_until = 0.0  # after a failed try, no wake-up before one interval passed
        self._watcher: asyncio.Task[None] | None = None

    @property
    def waiting(self) -> int:
        """Waiters now."""
        return self._waiting

    async def wait(self, until: float) -> Route | None:
        """The route now, once it is not ``hold`` and (for ``gateway``) the port accepts."""
        while True:
            if self._go.is_set():
                route = self._route()  # asked again: it may have changed since the wake-up
                if route.kind != "hold":
                    return route
                self._go.clear()
            left = until - time.monotonic()
            if left <= 0:
                return None
            self._waiting += 1
            try:
                self._watch()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._go.wait(), left)
            finally:
                self._waiting -= 1

    def failed(self) -> None:
        """The route a waiter took did not connect: watch again, one interval on, before
        anyone tries it again (a refused relay must not become a loop of connects)."""
        self._go.clear()
        self._quiet_until = time.monotonic() + self._interval

    def _watch(self) -> None:
        if self._watcher is None or self._watcher.done():
            self._watcher = asyncio.ensure_future(self._until_a_way_out())

    async def _until_a_way_out(self) -> None:
        while self._waiting > 0:
            quiet = self._quiet_until - time.monotonic()
            if quiet > 0:
                await asyncio.sleep(quiet)
                continue
            route = self._route()
            if route.kind in ("relay", "close") or (
                route.kind == "gateway" and await self._port_accepts()
            ):
                self._go.set()
                return
            await asyncio.sleep(self._interval)

    async def _port_accepts(self) -> bool:
        try:
            _reader, writer = await self._knock()
        except OSError:
            return False
        with contextlib.suppress(OSError):
            writer.close()
        return True
