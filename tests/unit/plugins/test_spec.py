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
    if NAME_PATTERN.fullmatch(name):
        assert "/" not in name and not name.startswith(".") and len(name) <= 49


def test_size_cap_per_plugin_from_defaults_or_built_in(tmp_path: Path) -> None:
    text = "plugins:\n  - name: a\n  - name: b\n    maxSizeMiB: 7\n"
    assert [(e.name, e.max_size_mib, e.error) for e in load_spec(spec(tmp_path, text))] == [
        ("a", 100, None),
        ("b", 7, None),
    ]
    with_defaults = load_spec(spec(tmp_path, "defaults:\n  maxSizeMiB: 3\n" + text))
    assert [(e.name, e.max_size_mib, e.max_bytes) for e in with_defaults] == [
        ("a", 3, 3 * 1024 * 1024),
        ("b", 7, 7 * 1024 * 1024),
    ]


@pytest.mark.parametrize("value", ["0", "-1", "'10'", "true", "1.5", "null"])
def test_bad_size_cap_fails_that_plugin_alone(tmp_path: Path, value: str) -> None:
    text = f"plugins:\n  - name: ok\n  - name: bad\n    maxSizeMiB: {value}\n"
    ok, bad = load_spec(spec(tmp_path, text))
    assert ok.error is None
    assert "line 3: field 'maxSizeMiB' must be an integer >= 1" in (bad.error or "")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("defaults: 5\n", "line 1: 'defaults' must be a mapping"),
        ("defaults:\n  maxSizeMiB: 0\n", "line 1: field 'defaults.maxSizeMiB' must be"),
        ("defaults:\n  size: 1\n", "unknown field.*in 'defaults': size"),
    ],
)
def test_bad_defaults_fail_the_whole_spec(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(RuntimeFailure, match=message):
        load_spec(spec(tmp_path, text + "plugins:\n  - name: a\n"))


def test_a_name_is_at_most_49_characters(tmp_path: Path) -> None:
    """The chart names a container git-sync-<name>-init: 14 characters around the name, 63 in
    all (a Kubernetes DNS label); the chart's schema allows 49, so the runtime does too."""
    longest, too_long = "a" * 49, "b" * 50
    text = f"plugins:\n  - name: {longest}\n  - name: {too_long}\n"
    ok, bad = load_spec(spec(tmp_path, text))
    assert ok.error is None
    assert bad.error is not None and "field 'name' must match" in bad.error
    assert repr(too_long) in bad.error
    assert not bad.valid_name


@pytest.mark.parametrize(
    ("entry", "value"),
    [
        ("{name: a, enabled: 'yes'}", "'yes'"),
        ("{name: a, maxSizeMiB: 1.5}", "1.5"),
        ("{name: a, subPath: 3}", "3"),
    ],
)
def test_entry_errors_name_the_value(tmp_path: Path, entry: str, value: str) -> None:
    (bad,) = load_spec(spec(tmp_path, f"plugins:\n  - {entry}\n"))
    assert bad.error is not None and bad.error.endswith(f", got {value}")
