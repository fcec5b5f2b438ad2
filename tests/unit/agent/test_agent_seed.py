"""Three-way seeding of config.yaml and SOUL.md: chart changes land, user edits survive."""

from __future__ import annotations

from pathlib import Path

import pytest
from ruamel.yaml import YAML

from hermes_runtime.agent import seed_config, seed_soul
from hermes_runtime.common.errors import RuntimeFailure

SEED_V1 = """\
# chart seed
model:
  provider: custom
  default: small-model   # the chart's choice
  base_url: http://llm:8080/v1
agent:
  max_turns: 20
display:
  compact: true
"""


@pytest.fixture
def dirs(tmp_path: Path) -> tuple[Path, Path, Path]:
    seed = tmp_path / "etc" / "config.yaml"
    seed.parent.mkdir()
    data = tmp_path / "data"
    data.mkdir()
    return seed, data / "config.yaml", data / ".hermes-runtime"


def load(path: Path) -> dict:
    return YAML(typ="safe").load(path.read_text())


def test_first_start_copies_the_seed_verbatim(dirs: tuple[Path, Path, Path]) -> None:
    seed, target, state = dirs
    seed.write_text(SEED_V1)
    result = seed_config(seed, target, state)
    assert result.action == "created"
    assert target.read_text() == SEED_V1
    assert (state / "seed-config.yaml").read_text() == SEED_V1


def test_restart_with_the_same_seed_touches_nothing(dirs: tuple[Path, Path, Path]) -> None:
    seed, target, state = dirs
    seed.write_text(SEED_V1)
    seed_config(seed, target, state)
    target.write_text(SEED_V1.replace("max_turns: 20", "max_turns: 99"))
    before = target.stat().st_mtime_ns
    assert seed_config(seed, target, state).action == "unchanged"
    assert target.stat().st_mtime_ns == before
    assert load(target)["agent"]["max_turns"] == 99


def test_seed_change_applies_untouched_keys_and_keeps_user_edits(
    dirs: tuple[Path, Path, Path],
) -> None:
    seed, target, state = dirs
    seed.write_text(SEED_V1)
    seed_config(seed, target, state)
    # The user edits one key and adds a section with a comment; Hermes adds its own key.
    user = SEED_V1.replace("max_turns: 20", "max_turns: 50")
    user += "# my own notes\nmemory:\n  enabled: true\n_config_version: 7\n"
    target.write_text(user)
    # The chart changes the key the user edited, and another one the user did not touch.
    seed.write_text(
        SEED_V1.replace("max_turns: 20", "max_turns: 30").replace("small-model", "big-model")
    )
    result = seed_config(seed, target, state)
    assert result.action == "updated"
    assert result.applied_keys == ["model.default"]
    assert result.kept_user_keys == ["agent.max_turns"]
    merged = load(target)
    assert merged["model"]["default"] == "big-model"
    assert merged["agent"]["max_turns"] == 50
    assert merged["memory"] == {"enabled": True}
    assert merged["_config_version"] == 7
    text = target.read_text()
    assert "# my own notes" in text
    assert "# the chart's choice" in text
    assert "# chart seed" in text


def test_keys_the_chart_adds_or_removes(dirs: tuple[Path, Path, Path]) -> None:
    seed, target, state = dirs
    seed.write_text(SEED_V1)
    seed_config(seed, target, state)
    new_seed = SEED_V1.replace("display:\n  compact: true\n", "") + "tools:\n  web: false\n"
    seed.write_text(new_seed)
    result = seed_config(seed, target, state)
    assert sorted(result.applied_keys) == ["display", "tools"]
    merged = load(target)
    assert "display" not in merged
    assert merged["tools"] == {"web": False}


def test_user_deleted_key_stays_deleted_when_the_chart_changes_it(
    dirs: tuple[Path, Path, Path],
) -> None:
    seed, target, state = dirs
    seed.write_text(SEED_V1)
    seed_config(seed, target, state)
    target.write_text(SEED_V1.replace("display:\n  compact: true\n", ""))
    seed.write_text(SEED_V1.replace("compact: true", "compact: false"))
    result = seed_config(seed, target, state)
    assert result.action == "kept-user-edits"
    assert result.kept_user_keys == ["display"]
    assert "display" not in load(target)


def test_existing_config_without_a_record_only_gains_missing_keys(
    dirs: tuple[Path, Path, Path],
) -> None:
    """A config.yaml restored from a backup (or written by Hermes) has no seed record."""
    seed, target, state = dirs
    target.write_text("model:\n  default: restored-model\n")
    seed.write_text(SEED_V1)
    result = seed_config(seed, target, state)
    merged = load(target)
    assert merged["model"]["default"] == "restored-model"
    assert merged["model"]["provider"] == "custom"
    assert merged["agent"]["max_turns"] == 20
    assert "model.default" in result.kept_user_keys


def test_lists_are_replaced_as_a_whole(dirs: tuple[Path, Path, Path]) -> None:
    seed, target, state = dirs
    seed.write_text("toolsets:\n- web\n- terminal\n")
    seed_config(seed, target, state)
    seed.write_text("toolsets:\n- web\n")
    seed_config(seed, target, state)
    assert load(target)["toolsets"] == ["web"]


def test_no_seed_file_means_nothing_to_do(dirs: tuple[Path, Path, Path]) -> None:
    seed, target, state = dirs
    assert seed_config(seed, target, state).action == "no-seed"
    assert seed_config(None, target, state).action == "no-seed"
    assert not target.exists()


@pytest.mark.parametrize(
    ("text", "message"),
    [("model: [unclosed\n", "not valid YAML"), ("- a\n- b\n", "must be a mapping")],
)
def test_a_bad_seed_is_refused_naming_the_file_and_nothing_changes(
    dirs: tuple[Path, Path, Path], text: str, message: str
) -> None:
    seed, target, state = dirs
    seed.write_text(SEED_V1)
    seed_config(seed, target, state)
    target.write_text(SEED_V1 + "extra: 1\n")
    seed.write_text(text)
    with pytest.raises(RuntimeFailure, match=message) as exc:
        seed_config(seed, target, state)
    assert str(seed) in str(exc.value)
    assert target.read_text() == SEED_V1 + "extra: 1\n"
    assert (state / "seed-config.yaml").read_text() == SEED_V1
    assert [p.name for p in target.parent.iterdir() if p.name.endswith(".tmp")] == []


def test_a_broken_user_config_is_reported_not_overwritten(dirs: tuple[Path, Path, Path]) -> None:
    seed, target, state = dirs
    target.write_text("model: {oops\n")
    seed.write_text(SEED_V1)
    with pytest.raises(RuntimeFailure, match="not valid YAML") as exc:
        seed_config(seed, target, state)
    assert str(target) in str(exc.value)
    assert target.read_text() == "model: {oops\n"


def test_soul_is_seeded_then_follows_the_chart_until_the_user_edits_it(tmp_path: Path) -> None:
    seed, target, state = tmp_path / "SOUL.seed.md", tmp_path / "SOUL.md", tmp_path / "state"
    seed.write_text("You are v1.\n")
    assert seed_soul(seed, target, state).action == "created"
    assert target.read_text() == "You are v1.\n"
    seed.write_text("You are v2.\n")
    assert seed_soul(seed, target, state).action == "updated"
    assert target.read_text() == "You are v2.\n"
    target.write_text("I wrote my own soul.\n")
    seed.write_text("You are v3.\n")
    assert seed_soul(seed, target, state).action == "kept-user-edits"
    assert target.read_text() == "I wrote my own soul.\n"
    seed.write_text("You are v4.\n")
    assert seed_soul(seed, target, state).action == "kept-user-edits"
    assert target.read_text() == "I wrote my own soul.\n"


def test_soul_without_a_record_is_kept_when_it_differs(tmp_path: Path) -> None:
    seed, target, state = tmp_path / "SOUL.seed.md", tmp_path / "SOUL.md", tmp_path / "state"
    target.write_text("Restored soul.\n")
    seed.write_text("Chart soul.\n")
    assert seed_soul(seed, target, state).action == "kept-user-edits"
    assert target.read_text() == "Restored soul.\n"
