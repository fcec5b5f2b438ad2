"""Keep one test process's machine-wide defaults away from another's.

``backup create`` stages its snapshots in ``$TMPDIR/hermes-restic-stage`` unless given
``--work-dir``, and refuses to start while another backup stages there (the product's guard
against two backups of one machine racing). Two test processes on one machine (pytest-xdist
workers, or a second checkout's test run) would trip that guard on each other's backups. So
each test process gets its own TMPDIR inside its pytest base temp, inherited by every CLI
subprocess; the guard itself is still exercised inside one process.
``tests/conftest.py`` loads this module as a plugin.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest


@pytest.fixture(scope="session", autouse=True)
def private_tmpdir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """TMPDIR for this test process (each xdist worker has its own base temp)."""
    path = tmp_path_factory.mktemp("tmpdir", numbered=False)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("TMPDIR", str(path))
        patch.setattr(tempfile, "tempdir", None)  # gettempdir() reads TMPDIR again
        yield path
