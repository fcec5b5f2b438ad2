"""The pod's stop and hand-over: one owner (``HandOver``), one phase, from the preStop hook to exit.

With one replica there is no other pod to send clients to while this one stops, so it keeps
serving until a successor is ready to take over. A stop, step by step:

0. Before it, the successor (a new pod on the same data volume) waits for the data dir lock
   (``datalock.py``) while its gateway process imports Hermes' libraries (``zygote.py``);
   once warm it holds ``successor.lock`` with its pod IP and ports in it (``successor.py``).
1. The kubelet runs the preStop hook, an ``exec`` of ``hermes-runtime agent pre-stop``
   (``hook.py``), which asks this entrypoint over its Unix socket (``control.py``): that
   calls ``HandOver.pre_stop``. Phase ``SERVING`` -> ``WAITING_FOR_SUCCESSOR``: the pod stays
   ready and its gateway serves, while it looks for the successor's announcement, at most
   ``handover_seconds``. (Another pod's ``flock`` sends no event: the file is looked at every
   ``poll_seconds``. A SIGTERM ends the wait at once.)
2. The wait ends. A successor that said where it is: ``RELAYING``. ``/ready`` stays 200
   ("handover"): Kubernetes keeps sending clients to a terminating pod that is ready while no
   other endpoint is, and this pod is the way in until the successor is ready. No successor
   (or none that said where): ``LEAVING``, ``/ready`` turns 503 at once and the pod may vanish
   ``prestop_seconds`` later (the endpoints need that long to drop it). The hook returns, and
   the abandon timer starts: a stop that no SIGTERM follows within ``abandon_seconds`` of the
   hook (the grace period plus a margin) was started by hand (``kubectl exec``) or from inside
   the container; it is undone, phase back to ``SERVING`` (``agent.pre_stop.abandoned``), so
   the pod does not stay out of the Service until someone deletes it.
   Only the first hook of a stop counts: another one before its SIGTERM or its undo is
   answered at once and ignored (``agent.pre_stop.ignored``), and never re-arms the timer.
   The kubelet runs the hook once per stop, so a repeated or abandoned hook comes from a
   shell as the agent's user (which can reach the socket): after one abandoned stop, a later
   hook no longer turns the pod unready before SIGTERM (``agent.pre_stop.deferred``; it still
   waits for and relays to a successor, which keeps it ready), so calling ``pre-stop`` in a
   loop cannot keep the pod out of the Service. A real stop is then unready from its SIGTERM.
3. The kubelet sends SIGTERM: ``HandOver.terminate``, which tells the supervisor
   (``stop_gateway``): the gateway gets SIGINT (Hermes' intentional stop), drains its
   in-flight turns (``StopTimes.drain_timeout``) and exits, or is killed after
   ``StopTimes.stop_budget``. From now on the front door asks ``route``: in ``RELAYING``
   every new client goes to the successor's front door (which holds it until its own gateway
   answers); otherwise to the draining gateway while it runs, then closed at once.
   ``RELAYING`` also starts asking the successor, every ``RELAY_POLL_SECONDS``: first for its
   proof that it is a pod of this release at the address it announced (``successor.py``,
   ``RelayPolicy``; until then new clients are held here, no byte leaves; a wrong proof ends
   the relay: ``LEAVING``), then for its ``/ready``.
4. The gateway exits; the entrypoint kills what is left of its process group and releases the
   data dir lock: the successor takes it, seeds, and tells its warm gateway to go.
5. The successor's ``/ready`` answers 200: ``RELAYING`` -> ``LEAVING`` (``/ready`` 503 now,
   still relaying) for ``prestop_seconds``. ``linger`` keeps the entrypoint (and so the pod's
   address) alive until then, and until the connections it forwards are done: an address that
   vanishes while kube-proxy still sends to it makes clients' connects hang instead of fail.
   Then ``GONE``: the entrypoint exits.

A SIGTERM with no hook before it (``agent run`` outside the chart, Ctrl+C): ``LEAVING`` at once,
with nothing to linger for. The phase lives on the entrypoint's event loop: every method here
runs on it (the hook's socket, the signal handlers, ``/ready``, the front door all do).
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from hermes_runtime.agent.httpget import http_get
from hermes_runtime.agent.successor import RelayPolicy, Successor, waiting_successor
from hermes_runtime.common.logs import log_event

EXIT_MARGIN_SECONDS = 2.0  # after killing the gateway: our own exit, before the kubelet's SIGKILL
DRAIN_MARGIN_SECONDS = 3.0  # after Hermes' drain: its shutdown (adapters, state files)
# SIGTERM comes within the grace period of the hook: a stop still without one this long after
# that (the grace period plus this margin) was not the kubelet's, and is undone.
ABANDON_MARGIN_SECONDS = 10.0
RELAY_POLL_SECONDS = 0.2  # how often a stopping pod asks its successor whether it is ready
PROBE_TIMEOUT = 2.0  # per ask
STOPPING = {"stopping": "the pod is stopping"}


@dataclass(frozen=True)
class StopTimes:
    """How the pod's grace period (``terminationGracePeriodSeconds``) is spent on a stop:
    ``handover_seconds`` waiting for a successor (preStop), ``prestop_seconds`` staying
    reachable once unready, then the gateway's drain, Hermes' shutdown and our exit."""

    grace_seconds: float
    handover_seconds: float = 0.0
    prestop_seconds: float = 0.0
    stop_timeout: float | None = None  # an explicit stop budget (``--stop-timeout``)

    @property
    def stop_budget(self) -> float:
        """Seconds from SIGTERM until the gateway is killed: the grace period minus the
        preStop wait, the reachable time and our own exit (at least 1)."""
        if self.stop_timeout is not None:
            return self.stop_timeout
        spent = self.handover_seconds + self.prestop_seconds + EXIT_MARGIN_SECONDS
        return max(1.0, self.grace_seconds - spent)

    @property
    def drain_timeout(self) -> float:
        """Hermes' ``agent.restart_drain_timeout``: in-flight turns get this long to finish
        after SIGTERM. Never 0 (Hermes' default, which interrupts every running turn at once)."""
        return max(1.0, self.stop_budget - DRAIN_MARGIN_SECONDS)

    @property
    def abandon_seconds(self) -> float:
        """After the hook began, how long without SIGTERM before the stop is undone."""
        return self.grace_seconds + ABANDON_MARGIN_SECONDS


class Phase(enum.Enum):
    """Where the pod is in its stop; see the module's walk-through."""

    SERVING = "serving"  # ready by its checks; clients go to our gateway
    WAITING_FOR_SUCCESSOR = "waiting-for-successor"  # the hook holds; still ready, serving
    RELAYING = "relaying"  # ready (the way in); after SIGTERM clients go to the successor
    LEAVING = "leaving"  # unready; reachable until ``leave_at`` (relaying, if it did)
    GONE = "gone"  # reachable time over: the entrypoint exits


@dataclass(frozen=True)
class Route:
    """Where the front door sends a new client now: ``gateway`` (ours, on loopback), ``hold``
    (ours is being replaced: wait), ``relay`` (the successor's front door, ``address``) or
    ``close`` (the pod is going away and no gateway will answer)."""

    kind: str
    address: tuple[str, int] | None = None


GATEWAY = Route("gateway")
HOLD = Route("hold")
CLOSE = Route("close")


class GatewayView(Protocol):
    """What the route needs of the supervisor."""

    @property
    def running(self) -> bool: ...

    @property
    def replacing(self) -> bool: ...


class Connections(Protocol):
    """What ``linger`` needs of the front door."""

    @property
    def active(self) -> int: ...

    async def wait_idle(self) -> None: ...


async def successor_ready(successor: Successor) -> bool:
    """Whether the successor's ``/ready`` (on its metrics port) answers 200."""
    try:
        status, _ = await http_get(
            successor.host, successor.metrics_port, "/ready", timeout=PROBE_TIMEOUT
        )
    except (OSError, ValueError):
        return False
    return status == 200


class HandOver:
    """The one owner of the stop: its phase, the successor it relays to, the abandon timer."""

    def __init__(
        self,
        times: StopTimes,
        state_dir: Path,
        stop_gateway: Callable[[int], None],
        *,
        poll_seconds: float = 0.1,
        probe: Callable[[Successor], Awaitable[bool]] = successor_ready,
        relay: RelayPolicy | None = None,
    ) -> None:
        self._times = times
        self._policy = relay or RelayPolicy()  # without a key: never relay
        self._state_dir = state_dir
        self._stop_gateway = stop_gateway
        self._poll_seconds = poll_seconds
        self._probe = probe
        self._phase = Phase.SERVING
        self._terminated = asyncio.Event()  # the kubelet's SIGTERM came: nothing is undone
        self._left = asyncio.Event()  # phase reached LEAVING
        self._relay: Successor | None = None
        self._proven = False  # the relay's address proved it is a pod of this release
        self._refused: set[Successor] = set()  # announcements refused (logged once each)
        self._stop_started: float | None = None  # the counted hook's start, until its undo
        self._distrusted = False  # a stop was abandoned: hooks no longer turn us unready
        self._leave_at = 0.0  # monotonic: when the pod may vanish (in LEAVING)
        self._abandon: asyncio.TimerHandle | None = None
        self._prober: asyncio.Task[None] | None = None

    @property
    def phase(self) -> Phase:
        return self._phase

    @property
    def terminating(self) -> bool:
        """Whether the kubelet's SIGTERM came (from then on nothing is undone)."""
        return self._terminated.is_set()

    # -- 1, 2: the preStop hook ----------------------------------------------------------------
    async def pre_stop(self) -> dict[str, Any]:
        """The hook: wait (still serving) for a warm successor, then stop; the hook's answer.
        Another hook before this stop's SIGTERM or undo is ignored (module docstring)."""
        if self._stop_started is not None or self.terminating:
            return self._ignored()
        self._stop_started = time.monotonic()
        return await self._wait_then_stop()

    def _ignored(self) -> dict[str, Any]:
        started = self._stop_started
        since = round(time.monotonic() - started, 2) if started is not None else None
        log_event(
            "agent.pre_stop.ignored",
            level="warning",
            phase=self.phase.value,
            since_seconds=since,
            reason="a stop is under way: only its first hook counts (the kubelet runs one)",
        )
        return {
            "stopping": True,
            "ignored": True,
            "successor": self._relay is not None,
            "waited_seconds": 0,
        }

    async def _wait_then_stop(self) -> dict[str, Any]:
        started = time.monotonic()
        self._enter(Phase.WAITING_FOR_SUCCESSOR)
        successor = await self._look_for_successor(started + self._times.handover_seconds)
        waited = round(time.monotonic() - started, 2)
        relay = successor if successor is not None and successor.reachable else None
        deferred = relay is None and self._distrusted
        if self.phase is Phase.WAITING_FOR_SUCCESSOR:  # a SIGTERM may have decided already
            if relay is not None:
                self._relay_to(relay)
            elif deferred:
                self._defer()
            else:
                self._leave(time.monotonic() + self._times.prestop_seconds)
        log_event(
            "agent.pre_stop",
            reachable_seconds=self._times.prestop_seconds,
            successor=successor is not None,
            relay=f"{relay.host}:{relay.api_port}" if relay is not None else None,
            waited_seconds=waited,
        )
        self._arm_abandon(started)
        answer = {"stopping": True, "successor": successor is not None, "waited_seconds": waited}
        return {**answer, "deferred": True} if deferred else answer

    def _defer(self) -> None:
        """A hook after an abandoned stop, no successor: stay ready until a SIGTERM."""
        log_event(
            "agent.pre_stop.deferred",
            level="warning",
            reason="an earlier stop was abandoned (no SIGTERM followed its hook): the pod "
            "turns unready at the SIGTERM a real stop sends, not at the hook",
        )
        self._enter(Phase.SERVING)

    async def _look_for_successor(self, deadline: float) -> Successor | None:
        """The successor's announcement, looked at until ``deadline`` or a SIGTERM; one whose
        address the relay policy refuses counts as none."""
        while True:
            # A file on the data volume (maybe NFS): off the loop, which carries the clients.
            successor = self._admitted(await asyncio.to_thread(waiting_successor, self._state_dir))
            left = deadline - time.monotonic()
            if successor is not None or self.terminating or left <= 0:
                return successor
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._terminated.wait(), min(self._poll_seconds, left))

    def _admitted(self, successor: Successor | None) -> Successor | None:
        if successor is None or not successor.reachable:
            return successor
        why = self._policy.refusal(successor)
        if why is None:
            return successor
        if successor not in self._refused:
            self._refused.add(successor)
            self._refuse_log(successor, why)
        return None

    def _arm_abandon(self, hook_started: float) -> None:
        """Undo this stop if no SIGTERM came ``abandon_seconds`` after the hook began (a later
        hook's timer replaces an earlier one's)."""
        if self.terminating or self._times.abandon_seconds <= 0:
            return
        if self._abandon is not None:
            self._abandon.cancel()
        delay = max(0.0, hook_started + self._times.abandon_seconds - time.monotonic())
        self._abandon = asyncio.get_running_loop().call_later(delay, self._undo)

    def _undo(self) -> None:
        self._abandon = None
        if self.terminating or self.phase not in (Phase.SERVING, Phase.RELAYING, Phase.LEAVING):
            return
        log_event(
            "agent.pre_stop.abandoned",
            level="warning",
            after_seconds=self._times.abandon_seconds,
            reason="no SIGTERM followed the preStop hook: started by hand, not by the kubelet",
            effect="later hooks no longer turn the pod unready before a SIGTERM",
        )
        self._relay = None
        self._stop_started = None
        self._distrusted = True
        self._left.clear()
        self._enter(Phase.SERVING)

    # -- 3: SIGTERM ------------------------------------------------------------------------------
    def terminate(self, signum: int) -> None:
        """The kubelet's SIGTERM (or SIGINT): stop the gateway; a hook still waiting ends."""
        first = not self.terminating
        self._terminated.set()
        if self._abandon is not None:
            self._abandon.cancel()
            self._abandon = None
        if first and self.phase is Phase.SERVING:
            self._leave(time.monotonic())  # no hook before: nothing to stay reachable for
        if first and self.phase is Phase.RELAYING:
            self._start_probe()
        self._stop_gateway(signum)  # a second signal too: the supervisor forwards it

    def route(self, gateway: GatewayView) -> Route:
        """The front door's decision for a new client (see ``Route``)."""
        if self.terminating:
            if self._relay is not None and self._proven:
                return Route("relay", (self._relay.host, self._relay.api_port))
            if self._relay is not None:
                return HOLD  # no client byte leaves before the successor's proof
            return GATEWAY if gateway.running else CLOSE
        return HOLD if gateway.replacing else GATEWAY

    def stop_verdict(self) -> dict[str, str] | None:
        """What ``/ready`` says instead of its checks once the pod stops (None: not stopping)."""
        if self.phase is Phase.RELAYING:
            return {"handover": "ok"}  # still the way in: new clients go to the successor
        if self.phase in (Phase.LEAVING, Phase.GONE) or self.terminating:
            return dict(STOPPING)
        return None

    # -- 5: the successor ready, then linger -------------------------------------------------------
    def _start_probe(self) -> None:
        relay = self._relay
        if relay is not None and self._prober is None:
            self._prober = asyncio.get_running_loop().create_task(self._until_ready(relay))

    async def _until_ready(self, relay: Successor) -> None:
        if not await self._until_proven(relay):
            return
        while self.phase is Phase.RELAYING:
            if await self._probe(relay):
                log_event("agent.handover.successor_ready", successor=relay.host)
                self._leave(time.monotonic() + self._times.prestop_seconds)
                return
            await asyncio.sleep(RELAY_POLL_SECONDS)

    async def _until_proven(self, relay: Successor) -> bool:
        """Ask the successor for its proof until it gives one (True), gives a wrong one (the
        relay ends: ``LEAVING``) or the phase moves on."""
        while self.phase is Phase.RELAYING:
            try:
                why = await self._policy.verify(relay, PROBE_TIMEOUT)
            except OSError:  # not listening yet: it starts once our lock is released
                await asyncio.sleep(RELAY_POLL_SECONDS)
                continue
            if why is None:
                self._proven = True
                log_event("agent.handover.successor_proven", successor=relay.host)
                return True
            self._refuse_log(relay, why)
            self._relay = None
            self._leave(time.monotonic() + self._times.prestop_seconds)
            return False
        return False

    def _refuse_log(self, successor: Successor, why: str) -> None:
        log_event(
            "agent.handover.successor_refused",
            level="warning",
            successor=f"{successor.host}:{successor.api_port}",
            reason=why,
            effect="no client is relayed there",
        )

    async def linger(self, budget: float, door: Connections | None) -> None:
        """After the gateway's exit: stay reachable until the pod may vanish (``LEAVING``'s
        ``leave_at``) and until the front door forwards no connection any more, at most
        ``budget`` seconds; then ``GONE``."""
        busy = door is not None and door.active > 0
        if self.phase is Phase.RELAYING or self._leave_at > time.monotonic() or busy:
            log_event("agent.stop.reachable", relay=self._relay is not None)
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(budget):
                await self._left.wait()
                await asyncio.sleep(max(0.0, self._leave_at - time.monotonic()))
                if door is not None:
                    await door.wait_idle()
        if self._prober is not None:
            self._prober.cancel()
        self._enter(Phase.GONE)

    # -- transitions -------------------------------------------------------------------------
    def _relay_to(self, successor: Successor) -> None:
        self._relay = successor
        self._enter(Phase.RELAYING)
        if self.terminating:
            self._start_probe()

    def _leave(self, leave_at: float) -> None:
        self._leave_at = leave_at
        self._left.set()
        self._enter(Phase.LEAVING)

    def _enter(self, phase: Phase) -> None:
        if phase is not self._phase:
            log_event("agent.handover.phase", phase=phase.value, previous=self._phase.value)
            self._phase = phase
