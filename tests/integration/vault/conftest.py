"""The seeded OpenBao dev server fixture for the vault integration tests (see vault_testlib)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from support.openbao import openbao_dev_server
from vault_testlib import SeededVault, seed


@pytest.fixture(scope="session")
def vault() -> Iterator[SeededVault]:
    """One seeded OpenBao container for the session: tests add what they need under paths
    and role names no other test reads, so they share it safely."""
    with openbao_dev_server() as server:
        yield seed(server)
