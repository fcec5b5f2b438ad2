"""The data volume's reserve (``datareserve.py``) on a real size-limited tmpfs (issue 30).

``/ready`` measures on its worker thread; the front door, on the event loop, reads the last
figure at once and has a stale one refreshed on a worker thread, never waiting for it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.fullvolume import fill, small_tmpfs

from hermes_runtime.agent.datareserve import OK, DataReserve


@pytest.fixture
def volume(tmp_path: Path) -> Iterator[Path]:
    with small_tmpfs(tmp_path / "volume", mib=4) as mounted:
        yield mounted


def test_measure_names_the_volume_and_its_free_bytes_under_the_reserve(volume: Path) -> None:
    reserve = DataReserve(volume, 1 << 20)
    assert reserve.measure() == OK
    ballast = fill(volume)
    verdict = reserve.measure()
    assert verdict.startswith(f"data volume {volume} is full: 0 bytes free"), verdict
    assert "reserve of 1 MiB" in verdict and "agent.dataVolume.minFreeMiB" in verdict
    assert DataReserve(volume, 0).measure() == OK  # 0: the reserve is off
    ballast.unlink()
    assert reserve.measure() == OK  # no restart, no state kept beyond the last figure


def test_the_event_loop_gets_the_last_figure_at_once_and_a_stale_one_is_refreshed(
    volume: Path,
) -> None:
    async def scenario() -> list[str]:
        reserve = DataReserve(volume, 1 << 20, max_age=0.0)  # every figure is stale at once
        seen = [reserve.verdict()]  # never measured: not full until a figure says so
        fill(volume)
        for _ in range(400):  # the refresh runs on a worker thread; the loop never waits
            seen.append(reserve.verdict())
            if seen[-1] != OK:
                break
            await asyncio.sleep(0.01)
        return seen

    seen = asyncio.run(scenario())
    assert seen[0] == OK
    assert seen[-1].startswith(f"data volume {volume} is full"), seen[-1]


def test_a_volume_that_cannot_be_measured_is_named(tmp_path: Path) -> None:
    verdict = DataReserve(tmp_path / "missing", 1 << 20).measure()
    assert verdict.startswith(f"data volume {tmp_path / 'missing'}: cannot read its free space")
