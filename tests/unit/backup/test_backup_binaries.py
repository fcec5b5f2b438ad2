"""restic and Litestream are found by one rule: the pinning variable, PATH, our Python's folder."""

from __future__ import annotations

from pathlib import Path

import pytest

from hermes_runtime.backup.binaries import LITESTREAM_ENV, RESTIC_ENV, find_binary
from hermes_runtime.common.errors import RuntimeFailure


def _executable(path: Path) -> Path:
    path.write_text("#!/bin/sh\n")
    path.chmod(0o755)
    return path


def test_the_pinning_variable_wins_over_path(tmp_path: Path) -> None:
    pinned = _executable(tmp_path / "restic-0.19.1")
    on_path = tmp_path / "bin"
    on_path.mkdir()
    _executable(on_path / "restic")
    env = {RESTIC_ENV: f" {pinned} ", "PATH": str(on_path)}
    assert find_binary("restic", "hint", env) == str(pinned)


def test_unset_it_is_looked_up_on_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _executable(tmp_path / "litestream")
    monkeypatch.setenv("PATH", str(tmp_path))
    assert find_binary("litestream", "hint", {LITESTREAM_ENV: ""}) == str(tmp_path / "litestream")


def test_a_pinned_path_that_is_missing_is_named_with_its_variable(tmp_path: Path) -> None:
    missing = tmp_path / "nowhere" / "restic"
    with pytest.raises(RuntimeFailure, match=f"{RESTIC_ENV}='{missing}'") as failure:
        find_binary("restic", "install it so", {RESTIC_ENV: str(missing)})
    assert "install it so" in str(failure.value)
