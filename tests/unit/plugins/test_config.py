"""plugins.enabled in config.yaml: managed names only, user settings and comments kept."""

from __future__ import annotations

from pathlib import Path

import pytest

from hermes_runtime.common.errors import RuntimeFailure
from hermes_runtime.plugins.config import apply_enabled, load_config

USER_CONFIG = """\
# my agent
model: x  # the model I like
plugins:
  enabled:
  - handmade   # mine
  - gone
# trailing note
display:
  skin: dark
"""


def apply(path: Path, managed: set[str], desired: dict[str, bool]) -> bool:
    return apply_enabled(path, load_config(path), managed, desired)


def test_adds_and_removes_only_managed_names_keeping_comments(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(USER_CONFIG)
    assert apply(path, {"gone", "weather"}, {"gone": False, "weather": True})
    text = path.read_text()
    assert "- handmade   # mine" in text
    assert "gone" not in text and "- weather" in text
    for kept in ("# my agent", "model: x  # the model I like", "# trailing note", "skin: dark"):
        assert kept in text
    assert load_config(path)["plugins"]["enabled"] == ["handmade", "weather"]


def test_no_change_means_no_write(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(USER_CONFIG)
    before = path.stat().st_mtime_ns
    assert not apply(path, {"handmade"}, {"handmade": True})
    assert path.stat().st_mtime_ns == before and path.read_text() == USER_CONFIG


def test_failed_plugin_keeps_its_membership(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(USER_CONFIG)
    assert not apply(path, {"gone"}, {})
    assert "gone" in path.read_text()


def test_missing_file_is_created_with_the_list(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    assert apply(path, {"a"}, {"a": True})
    assert load_config(path)["plugins"]["enabled"] == ["a"]


def test_keeps_file_mode(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text("a: 1\n")
    path.chmod(0o600)
    apply(path, {"p"}, {"p": True})
    assert path.stat().st_mode & 0o777 == 0o600


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("plugins: [unclosed\n", "invalid YAML"),
        ("- a\n", "top level must be a mapping"),
        ("plugins: on\n", "'plugins' must be a mapping"),
        ("plugins:\n  enabled: weather\n", "'plugins.enabled' must be a list"),
    ],
)
def test_bad_config_is_an_error_naming_the_file(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(text)
    with pytest.raises(RuntimeFailure, match=message) as info:
        load_config(path)
    assert str(path) in str(info.value)
