"""The data volume's reserve: below it the agent takes no new turns.

Why: on a full data volume Hermes still answers a turn (HTTP 200) it cannot store in its
``state.db``, and LCM can only hold the turn in memory until there is room
(``lcm/store/writebehind.py``). An answer the agent cannot keep must not be given. So while the
volume's free space (``statvfs``: blocks available to the agent's user) is below the reserve
(``HERMES_RUNTIME_DATA_MIN_FREE_MIB``, chart value ``agent.dataVolume.minFreeMiB``), ``/ready``
fails its ``data`` check (the Service stops routing to the pod) and the front door answers a
new API connection (but a ``GET`` or ``HEAD``, which stores nothing) with ``503`` and a body
saying the data volume is full. The reserve leaves
room for the turns already in flight. Once space is freed both return to normal by
themselves: nothing to restart.

The front door asks on the event loop, for every connection: it gets the last figure
(``verdict``), and a figure older than ``max_age`` is refreshed on a worker thread, so a hung
volume never stalls the loop (the first connections after a change see the old figure, for
about ``max_age``). ``/ready`` runs on a worker thread already and measures each time
(``measure``).
"""

from __future__ import annotations

import asyncio
import os
import threading
import time
from pathlib import Path

MIB = 1 << 20
OK = "ok"


class DataReserve:
    """The free bytes of the volume holding ``path``, against ``reserve_bytes`` (0: off)."""

    def __init__(self, path: Path, reserve_bytes: int, max_age: float = 1.0) -> None:
        self.path = path
        self.reserve_bytes = reserve_bytes
        self.max_age = max_age
        self._lock = threading.Lock()
        self._verdict = OK  # until the first figure: a volume we never measured is not full
        self._measured_at = -float("inf")
        self._refreshing = False

    def measure(self) -> str:
        """Measure now (blocks on the filesystem: a worker thread); ``"ok"`` or why not."""
        if self.reserve_bytes <= 0:
            return OK
        try:
            stats = os.statvfs(self.path)
        except OSError as exc:
            verdict = f"data volume {self.path}: cannot read its free space: {exc.strerror}"
        else:
            free = stats.f_bavail * stats.f_frsize
            verdict = OK if free >= self.reserve_bytes else self._full(free)
        with self._lock:
            self._verdict, self._measured_at = verdict, time.monotonic()
        return verdict

    def verdict(self) -> str:
        """The last figure's verdict, at once (the event loop); refreshes it when stale."""
        if self.reserve_bytes <= 0:
            return OK
        with self._lock:
            verdict = self._verdict
            stale = time.monotonic() - self._measured_at >= self.max_age
            start = stale and not self._refreshing
            if start:
                self._refreshing = True
        if start:
            asyncio.get_running_loop().run_in_executor(None, self._refresh)
        return verdict

    def _refresh(self) -> None:
        try:
            self.measure()
        finally:
            with self._lock:
                self._refreshing = False

    def _full(self, free: int) -> str:
        return (
            f"data volume {self.path} is full: {free} bytes free, under the reserve of "
            f"{self.reserve_bytes / MIB:g} MiB (HERMES_RUNTIME_DATA_MIN_FREE_MIB, chart value "
            "agent.dataVolume.minFreeMiB); the agent takes no new turns until space is freed"
        )
