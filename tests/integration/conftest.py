"""Fixtures of the whole integration tier: the fake LLM in its container.

The tier's servers run in containers from the images ``ci/build-images.sh`` builds, the
ones the e2e tier installs (``support.containers``): SeaweedFS (backup/conftest.py),
OpenBao (vault/conftest.py), the git server (plugins/conftest.py) and the fake LLM here.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator

import pytest
from fakes.fixtures import FakeLLM
from support.containers import remove, running, start_server
from support.net import free_port
from testcontainers.core.wait_strategies import HttpWaitStrategy


@pytest.fixture(scope="session")
def fake_llm_container() -> Iterator[FakeLLM]:
    """tests/fakes/openai_server.py in its image, on a free loopback port, for the session."""
    port = free_port()
    command = ["--host", "127.0.0.1", "--port", str(port)]
    ready = HttpWaitStrategy(port, "/health").for_status_code(200)
    with running(start_server("fake-llm", command, ready)) as container:
        yield FakeLLM("127.0.0.1", port, halt=functools.partial(remove, container))


@pytest.fixture
def fake_llm(fake_llm_container: FakeLLM) -> FakeLLM:
    """Overrides the unit tier's per-test process: the session's container, reset (normal
    mode, no recorded requests) for each test."""
    fake_llm_container.reset()
    return fake_llm_container
