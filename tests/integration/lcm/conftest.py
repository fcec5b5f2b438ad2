"""LCM integration fixtures: the fake LLM server as a real process, a real Hermes gateway."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fakes.fixtures import fake_llm  # noqa: F401  (re-exported fixture)
from lcm_gateway import Gateway  # beside this conftest: pytest puts its folder on sys.path


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
