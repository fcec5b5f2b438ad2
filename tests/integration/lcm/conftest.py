"""LCM integration fixtures: the fake LLM server as a real process, a real Hermes gateway."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from lcm_testlib import Gateway


@pytest.fixture
def make_gateway(tmp_path: Path) -> Iterator[Any]:
    """Build (not start) gateways on tmp_path; every one is stopped at teardown."""
    made: list[Gateway] = []

    def make(config_yaml: str) -> Gateway:
        gateway = Gateway(tmp_path / f"gw{len(made)}", config_yaml)
        made.append(gateway)
        return gateway

    try:
        yield make
    finally:
        for gateway in made:
            gateway.stop()
