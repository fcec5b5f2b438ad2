"""`agent` spells the plugin options as `plugins` does: --spec and --wait."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hermes_runtime.cli import main


def test_prepare_takes_the_plugins_groups_spec_and_wait(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = tmp_path / "data"
    data.mkdir()
    spec = tmp_path / "plugins.yaml"
    spec.write_text("plugins: []\n")
    status = main(
        ["agent", "prepare", "--data-dir", str(data), "--spec", str(spec), "--wait", "0", "--json"]
    )
    assert status == 0
    report = json.loads(capsys.readouterr().out)
    assert report["plugins"] == {"ok": True, "results": []}


@pytest.mark.parametrize("old", ["--plugin-spec", "--plugin-wait-seconds"])
def test_the_old_option_names_are_usage_errors(old: str, tmp_path: Path) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["agent", "prepare", "--data-dir", str(tmp_path), old, "1"])
    assert exit_info.value.code == 2
