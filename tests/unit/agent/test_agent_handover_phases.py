"""``HandOver`` on its own: the phases of a stop, what ``/ready`` and the front door are told in
each, and when the pod may vanish.

Real pieces only: the successor's announcement is a real ``flock`` on a real
``successor.lock`` (``successor.Announcement``, as a waiting pod holds it), the successor's
``/ready`` and ``/successor-proof`` a real HTTP server on loopback (the proof computed as
``endpoints.py`` does, with the release's key), the gateway's state the supervisor's two flags.
The entrypoint tests (test_agent_handover.py, test_agent_warm_handover.py,
test_agent_control.py) run the same object inside ``hermes-runtime agent run``.
"""

from __future__ import annotations

import asyncio
import json
import signal
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path

from hermes_runtime.agent.handover import HandOver, Phase, Route, StopTimes
from hermes_runtime.agent.successor import Announcement, RelayPolicy, Successor, answer_proof

KEY = "k" * 40  # the release's API key, which both pods read


@dataclass
class Gateway:
    """The supervisor's side of ``HandOver.route``."""

    running: bool = True
    replacing: bool = False


@dataclass
class Door:
    """What ``linger`` asks of the front door: open connections, and a wait for none."""

    active: int = 0
    idle: asyncio.Event = field(default_factory=asyncio.Event)

    async def wait_idle(self) -> None:
        await self.idle.wait()


@asynccontextmanager
async def successor_ready_endpoint(answers: list[int], api_port: int = 18000) -> AsyncIterator[int]:
    """A successor's metrics port: ``GET /ready`` answers the next status of ``answers``
    (the last one once they run out), ``GET /successor-proof`` the proof for 127.0.0.1 on
    ``api_port`` and this port; yields the port."""
    port = 0

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        target = head.split()[1].decode()
        if target.startswith("/successor-proof?nonce="):
            me = Successor("127.0.0.1", api_port, port)
            body = json.dumps({"proof": answer_proof(KEY, target.split("=", 1)[1], me)})
            status = 200
        else:
            status, body = (answers.pop(0) if len(answers) > 1 else answers[0]), ""
        writer.write(f"HTTP/1.0 {status} X\r\n\r\n{body}".encode())
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    async with server:
        yield port


def test_a_stop_with_a_warm_successor_relays_until_it_is_ready_then_leaves(
    tmp_path: Path,
) -> None:
    async def scenario() -> None:
        stopped: list[int] = []
        times = StopTimes(grace_seconds=60, handover_seconds=30, prestop_seconds=0.5)
        relay = RelayPolicy(key=lambda: KEY)
        handover = HandOver(times, tmp_path, stopped.append, poll_seconds=0.02, relay=relay)
        gateway = Gateway()
        assert handover.phase is Phase.SERVING and handover.stop_verdict() is None
        assert handover.route(gateway) == Route("gateway")
        async with successor_ready_endpoint([503, 503, 200]) as metrics_port:
            me = Successor("127.0.0.1", 18000, metrics_port)
            hook = asyncio.create_task(handover.pre_stop())
            await asyncio.sleep(0.2)
            assert handover.phase is Phase.WAITING_FOR_SUCCESSOR  # still serving, still ready
            assert not hook.done() and handover.stop_verdict() is None
            with Announcement(tmp_path, lambda: True, me) as announcement:
                announcement.announce()  # the successor is warm: the hook's wait ends
                answer = await asyncio.wait_for(hook, 10)
            assert answer["successor"] is True and answer["stopping"] is True
            assert handover.phase is Phase.RELAYING
            assert handover.stop_verdict() == {"handover": "ok"}  # the way in: stay ready
            assert handover.route(gateway) == Route("gateway")  # ours serves until SIGTERM
            handover.terminate(signal.SIGTERM)
            assert stopped == [signal.SIGTERM]  # the supervisor stops the gateway
            # Held here until the successor proved it is a pod of the release at its address.
            assert handover.route(gateway) == Route("hold")
            while handover.route(gateway) == Route("hold"):
                await asyncio.sleep(0.01)
            assert handover.route(gateway) == Route("relay", ("127.0.0.1", 18000))
            gateway.running = False  # the gateway exited; still relaying
            assert handover.route(gateway) == Route("relay", ("127.0.0.1", 18000))
            door = Door(active=1)
            lingering = asyncio.create_task(handover.linger(30, door))
            while handover.phase is Phase.RELAYING:  # the successor's /ready: 503, 503, 200
                await asyncio.sleep(0.05)
            left_at = time.monotonic()
            assert handover.phase is Phase.LEAVING
            assert handover.stop_verdict() == {"stopping": "the pod is stopping"}
            await asyncio.sleep(1.0)  # prestop_seconds over; a forwarded connection still open
            assert not lingering.done()
            door.active = 0
            door.idle.set()
            await asyncio.wait_for(lingering, 5)
            assert time.monotonic() - left_at >= 0.5
            assert handover.phase is Phase.GONE

    asyncio.run(scenario())


def test_without_a_successor_the_pod_turns_unready_and_closes_once_the_gateway_is_gone(
    tmp_path: Path,
) -> None:
    async def scenario() -> None:
        times = StopTimes(grace_seconds=60, handover_seconds=0.3, prestop_seconds=0.2)
        handover = HandOver(times, tmp_path, lambda _signum: None, poll_seconds=0.02)
        gateway = Gateway()
        answer = await asyncio.wait_for(handover.pre_stop(), 10)
        assert answer["successor"] is False and answer["waited_seconds"] >= 0.3
        assert handover.phase is Phase.LEAVING
        assert handover.stop_verdict() == {"stopping": "the pod is stopping"}
        assert handover.route(gateway) == Route("gateway")  # no SIGTERM yet: ours serves
        handover.terminate(signal.SIGTERM)
        assert handover.route(gateway) == Route("gateway")  # the draining gateway, while it runs
        gateway.running = False
        assert handover.route(gateway) == Route("close")  # no gateway will answer: at once
        door = Door()
        door.idle.set()
        await asyncio.wait_for(handover.linger(30, door), 5)
        assert handover.phase is Phase.GONE

    asyncio.run(scenario())


def test_a_sigterm_ends_the_hooks_wait_at_once_and_a_replaced_gateway_is_waited_for(
    tmp_path: Path,
) -> None:
    async def scenario() -> None:
        times = StopTimes(grace_seconds=60, handover_seconds=60)
        handover = HandOver(times, tmp_path, lambda _signum: None, poll_seconds=0.02)
        assert handover.route(Gateway(replacing=True)) == Route("hold")
        hook = asyncio.create_task(handover.pre_stop())
        await asyncio.sleep(0.1)
        handover.terminate(signal.SIGTERM)
        answer = await asyncio.wait_for(hook, 30)  # long before handover_seconds (60)
        assert answer["successor"] is False
        assert handover.phase is Phase.LEAVING
        # Once stopping, nothing is held for a replacement: no gateway comes back.
        assert handover.route(Gateway(running=False, replacing=True)) == Route("close")

    asyncio.run(scenario())
