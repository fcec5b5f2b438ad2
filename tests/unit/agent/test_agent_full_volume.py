"""A full data volume (issue 30): the entrypoint stops taking turns it could not store.

The real ``hermes-runtime agent run`` with the stand-in gateway (fake_gateway.py), its data
dir on a real size-limited tmpfs filled by a ballast. What must hold: below the reserve
(``HERMES_RUNTIME_DATA_MIN_FREE_MIB``) ``/ready`` answers 503 naming the volume and its free
bytes, and a new turn (a POST) on the API port gets a 503 saying the data volume is full
(not a hang, not a 200), while a GET (the kubelet's liveness probe) still passes; with the
reserve off, a volume full to the last byte still fails ``/ready`` (its probe used to
rewrite one small file in place, which a full volume allows); once the ballast is gone both
are back to normal without a restart.
"""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from fake_gateway import Entrypoint, start_entrypoint, wait_for
from support.fullvolume import fill, free_bytes, refuses_a_new_file, small_tmpfs

VOLUME_MIB = 16
RESERVE_MIB = 4


@pytest.fixture
def data(tmp_path: Path) -> Iterator[Path]:
    with small_tmpfs(tmp_path / "data", mib=VOLUME_MIB) as mounted:
        yield mounted


def ballast_leaving(volume: Path, keep: int) -> Path:
    """A ballast that leaves ``keep`` bytes free."""
    ballast = volume / "ballast.bin"
    with ballast.open("wb") as handle:
        handle.truncate(0)
        left = free_bytes(volume) - keep
        block = b"\xa5" * (1 << 20)
        while left > 0:
            left -= handle.write(block[: min(len(block), left)])
        handle.flush()
        os.fsync(handle.fileno())
    return ballast


def ready(agent: Entrypoint) -> tuple[int, dict[str, object]]:
    status, body = agent.get("/ready")
    return status, (json.loads(body) if body.startswith("{") else {"raw": body})


def api(agent: Entrypoint) -> tuple[int, str]:
    """A GET on the API port (the kubelet's liveness probe does this one)."""
    return agent.get("/health", port=agent.api_port, timeout=30)


def turn(agent: Entrypoint) -> tuple[int, str]:
    """A POST on the API port, as a chat turn is: ``(status, body)``, 0 without an answer."""
    request = urllib.request.Request(
        f"http://127.0.0.1:{agent.api_port}/v1/chat/completions",
        data=b'{"model": "hermes-agent", "messages": []}',
        headers={"Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()
    except OSError as exc:
        return 0, str(exc)


def test_below_the_reserve_ready_fails_and_new_turns_get_503_until_space_is_freed(
    data: Path, tmp_path: Path
) -> None:
    agent = start_entrypoint(
        data, tmp_path, "agent", HERMES_RUNTIME_DATA_MIN_FREE_MIB=str(RESERVE_MIB)
    )
    try:
        wait_for(lambda: ready(agent)[0] == 200, what="ready")
        assert api(agent)[0] == 200
        ballast = ballast_leaving(data, (RESERVE_MIB << 20) // 2)

        status, body = ready(agent)
        assert status == 503, body
        verdict = str(body["checks"]["data"])  # type: ignore[index]
        assert f"data volume {data} is full" in verdict and "bytes free" in verdict, verdict
        assert "agent.dataVolume.minFreeMiB" in verdict, verdict
        # The front door's figure is at most a second old: the next turns get the 503.
        wait_for(lambda: turn(agent)[0] == 503, what="the front door refusing")
        status, answer = turn(agent)
        assert status == 503 and f"data volume {data} is full" in json.loads(answer)["error"]
        metrics = agent.get("/metrics")[1]
        assert 'hermes_runtime_front_door_connections_total{outcome="full"}' in metrics
        assert api(agent)[0] == 200  # a GET stores nothing: the liveness probe still passes

        ballast.unlink()  # space is back: both return to normal by themselves
        wait_for(lambda: ready(agent)[0] == 200, what="ready again")
        wait_for(lambda: turn(agent)[0] != 503, what="turns forwarded again")
    finally:
        assert agent.stop() == 0, agent.output()[-2000:]


def test_a_volume_full_to_the_last_byte_fails_ready_even_without_a_reserve(
    data: Path, tmp_path: Path
) -> None:
    agent = start_entrypoint(data, tmp_path, "agent", HERMES_RUNTIME_DATA_MIN_FREE_MIB="0")
    try:
        wait_for(lambda: ready(agent)[0] == 200, what="ready")
        ready(agent)  # the probe has written its file before: a rewrite in place would pass
        ballast = fill(data)
        assert refuses_a_new_file(data)
        status, body = ready(agent)
        assert status == 503, body
        assert "No space left on device" in str(body["checks"]["data"]), body  # type: ignore[index]
        ballast.unlink()
        wait_for(lambda: ready(agent)[0] == 200, what="ready again")
    finally:
        assert agent.stop() == 0, agent.output()[-2000:]
