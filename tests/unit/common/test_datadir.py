"""The data dir is resolved by one rule, and every process's settings give the same folder."""

from __future__ import annotations

from pathlib import Path

import pytest

from hermes_runtime.agent.settings import AgentSettings
from hermes_runtime.cli.settings import CliSettings
from hermes_runtime.common.datadir import resolve_data_dir


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({}, Path("/opt/data")),
        ({"HERMES_HOME": ""}, Path("/opt/data")),
        ({"HERMES_HOME": "  "}, Path("/opt/data")),
        ({"HERMES_HOME": " /data/agent "}, Path("/data/agent")),
        ({"HERMES_HOME": "relative"}, Path("relative")),
    ],
)
def test_every_process_finds_the_same_data_dir(env: dict[str, str], expected: Path) -> None:
    assert resolve_data_dir(env) == expected
    assert AgentSettings.from_environ(env).data_dir == expected
    assert CliSettings.from_environ(env).data_dir == expected
