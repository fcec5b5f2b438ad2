"""LCM unit fixtures: a fresh database per test, and the fake LLM server."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from hermes_runtime.lcm.config import LcmConfig
from hermes_runtime.lcm.engine.lcmengine import LcmEngine
from hermes_runtime.lcm.store.lcmstore import LcmStore


@pytest.fixture
def store(tmp_path: Path) -> Iterator[LcmStore]:
    db = LcmStore(tmp_path / "lcm.db", tmp_path / "outputs", externalize_chars=2_000)
    yield db
    db.close()


@pytest.fixture
def engine(tmp_path: Path) -> Iterator[LcmEngine]:
    config = LcmConfig.for_home(tmp_path, {"embeddings": "off", "externalize_chars": 2_000})
    lcm = LcmEngine(config)
    yield lcm
    lcm.close()
