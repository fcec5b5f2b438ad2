"""The spec file: what parses, what each entry may say, and how errors name the line."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hermes_runtime.common.errors import RuntimeFailure
from hermes_runtime.plugins.spec import NAME_PATTERN, load_spec, normalize_sub_path


def spec(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "plugins.yaml"
    path.write_text(text)
    return path


def test_defaults_and_normalized_sub_path(tmp_path: Path) -> None:
    entries = load_spec(
        spec(
            tmp_path,
            "plugins:\n  - name: weather\n  - name: t\n    subPath: ./a//b/\n    enabled: false\n",
        )
    )
    assert [(e.name, e.sub_path, e.enabled, e.error) for e in entries] == [
        ("weather", "", True, None),
        ("t", "a/b", False, None),
    ]
    assert [e.line for e in entries] == [2, 3]


@pytest.mark.parametrize("text", ["", "plugins:\n", "plugins: []\n"])
def test_empty_specs_mean_no_plugins(tmp_path: Path, text: str) -> None:
    assert load_spec(spec(tmp_path, text)) == []


def test_syntax_error_names_file_and_line(tmp_path: Path) -> None:
    path = spec(tmp_path, "plugins:\n  - name: ok\n  - name: 'unterminated\n")
    with pytest.raises(RuntimeFailure, match=rf"plugin spec {path} line \d+"):
        load_spec(path)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("- a\n- b\n", "top level must be a mapping"),
        ("plugins: weather\n", "line 1: 'plugins' must be a list"),
    ],
)
def test_wrong_shapes_are_errors(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(RuntimeFailure, match=message):
        load_spec(spec(tmp_path, text))


def test_missing_file_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(RuntimeFailure, match="file not found"):
        load_spec(tmp_path / "absent.yaml")


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ("{name: Weather}", "field 'name' must match"),
        ("{name: ../evil}", "field 'name' must match"),
        ("{name: a, subPath: /etc}", "not absolute"),
        ("{name: a, subPath: x/../../y}", "must not contain '..'"),
        ("{name: a, subPath: .git/hooks}", "'.git'"),
        ("{name: a, subPath: 3}", "'subPath' must be a string"),
        ("{name: a, enabled: 'yes'}", "'enabled' must be true or false"),
        ("{name: a, repo: x}", "unknown field"),
        ("just-a-string", "entry must be a mapping"),
    ],
)
def test_bad_entries_fail_alone(tmp_path: Path, entry: str, message: str) -> None:
    path = spec(tmp_path, f"plugins:\n  - name: good\n  - {entry}\n")
    good, bad = load_spec(path)
    assert good.error is None
    assert bad.error is not None and message in bad.error
    assert f"{path} line 3" in bad.error


def test_duplicate_names_fail_the_second(tmp_path: Path) -> None:
    first, second = load_spec(spec(tmp_path, "plugins:\n  - name: a\n  - name: a\n"))
    assert first.error is None
    assert second.error is not None and "duplicate" in second.error


@given(st.lists(st.sampled_from(["a", "..", ".", "", "b", ".git", "c d"]), max_size=6))
def test_normalized_sub_paths_never_escape(parts: list[str]) -> None:
    raw = "/".join(parts)
    try:
        normalized = normalize_sub_path(raw)
    except ValueError:
        assert ".." in parts or ".git" in parts or raw.startswith("/")
        return
    assert not normalized.startswith("/")
    assert ".." not in normalized.split("/") and ".git" not in normalized.split("/")


@given(st.text(min_size=1, max_size=70))
def test_name_pattern_excludes_path_characters(name: str) -> None:
    if NAME_PATTERN.match(name):
        assert "/" not in name and not name.startswith(".") and len(name) <= 63
