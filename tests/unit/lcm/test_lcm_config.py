"""The ``lcm:`` section of config.yaml: how YAML's values are read, and how a bad one is named."""

from __future__ import annotations

from dataclasses import fields
from pathlib import Path
from typing import Any

import pytest

from hermes_runtime.common.errors import RuntimeFailure
from hermes_runtime.lcm.compact.policy import CompactionPolicy
from hermes_runtime.lcm.config import HermesConfigFile, LcmConfig, LcmSection, selected_config


def test_booleans_written_as_strings_mean_what_they_say(tmp_path: Path) -> None:
    """`import_hermes_state: "false"` (quoted, or from a templated value) turns the import off."""
    meanings = {"false": False, "False": False, "no": False, "off": False, "0": False}
    meanings |= {"true": True, "yes": True, "on": True, "1": True}
    read = {
        text: LcmConfig.for_home(tmp_path, {"import_hermes_state": text}).import_hermes_state
        for text in meanings
    }
    assert read == meanings


@pytest.mark.parametrize("text", ["maybe", "", "2"])
def test_a_word_that_is_no_boolean_is_refused(tmp_path: Path, text: str) -> None:
    with pytest.raises(RuntimeFailure, match=r"lcm\.import_hermes_state: expected bool") as exc:
        LcmConfig.for_home(tmp_path, {"import_hermes_state": text})
    assert repr(text) in str(exc.value)


@pytest.mark.parametrize("key", ["externalize_chars", "fresh_tail_messages", "commit_interval_ms"])
def test_a_fraction_for_a_whole_number_is_refused_not_truncated(tmp_path: Path, key: str) -> None:
    expected = rf"config\.yaml lcm\.{key}: expected int, got 2000\.7"
    with pytest.raises(RuntimeFailure, match=expected):
        LcmConfig.for_home(tmp_path, {key: 2000.7})
    # what is no fraction stays accepted: a whole float, a number as a string, a float field
    section = {key: 2000.0, "condense_fanout": "6", "replay_window_seconds": 3.7}
    config = LcmConfig.for_home(tmp_path, section)
    assert getattr(config, key, None) in (2000, None) and config.policy.condense_fanout == 6
    assert config.replay_window_seconds == 3.7


@pytest.mark.parametrize(
    ("section", "named"),
    [
        ({"threshold_percent": 2}, "lcm.threshold_percent: value 2 out of range"),
        ({"threshold_percent": "nan"}, "lcm.threshold_percent: expected float, got 'nan'"),
        ({"embeddings": "bert"}, "lcm.embeddings: value 'bert' not allowed"),
        ({"embeddings_dim": -1}, "lcm.embeddings_dim: value -1 out of range"),
        ({"embeddings_base_url": "api:8080"}, "lcm.embeddings_base_url: value 'api:8080'"),
    ],
)
def test_errors_name_the_key_and_the_value(
    tmp_path: Path, section: dict[str, Any], named: str
) -> None:
    with pytest.raises(RuntimeFailure) as exc:
        LcmConfig.for_home(tmp_path, section)
    assert f"config.yaml {named}" in str(exc.value)


def test_the_summary_key_never_reaches_an_error_message(tmp_path: Path) -> None:
    with pytest.raises(RuntimeFailure, match=r"lcm\.summary_api_key") as exc:
        LcmConfig.for_home(tmp_path, {"summary_api_key": ["sk-not-for-logs"]})
    assert "sk-not-for-logs" not in str(exc.value)


def test_the_rules_cover_every_setting() -> None:
    """A setting added to LcmConfig or CompactionPolicy without a rule would be refused."""
    own = {f.name for f in fields(LcmConfig)} - {"policy"}
    policy = {f.name for f in fields(CompactionPolicy)}
    assert set(LcmSection.model_fields) == own | policy
    plain = LcmConfig(db_path=Path("/data/lcm.db"), outputs_dir=Path("/data/outputs"))
    plain.validate()  # the defaults pass their own rules
    assert LcmConfig.for_home("/data") == plain


@pytest.mark.parametrize(
    "text",
    [
        "",  # empty
        "context:\n  engine: compressor\n",  # another engine
        "context: lcm\n",  # not the mapping Hermes reads
        "- context\n- lcm\n",  # no mapping at all
        "context: {engine: lcm\n",  # no YAML: Hermes reports it, nothing is selected
    ],
)
def test_a_config_yaml_that_does_not_pick_lcm_selects_nothing(tmp_path: Path, text: str) -> None:
    (tmp_path / "config.yaml").write_text(text)
    assert selected_config(tmp_path) is None
    assert selected_config(tmp_path / "no-such-home") is None


def test_the_selected_config_is_the_one_the_lcm_section_makes(tmp_path: Path) -> None:
    """Where lcm.db is comes from the section: the readiness probe reads the file the engine
    writes, not the default path."""
    moved = tmp_path / "elsewhere" / "memory.db"
    config_yaml = tmp_path / "config.yaml"
    config_yaml.write_text(
        f"context:\n  engine: lcm\nlcm:\n  db_path: {moved}\n  threshold_percent: 0.6\n"
    )
    config = selected_config(tmp_path)
    assert config is not None
    assert (config.db_path, config.threshold_percent) == (moved, 0.6)
    assert config == HermesConfigFile.read(tmp_path).lcm_config()

    config_yaml.write_text("context:\n  engine: lcm\nlcm:\n  threshold_percent: 2\n")
    with pytest.raises(RuntimeFailure, match=r"config\.yaml lcm\.threshold_percent: value 2"):
        selected_config(tmp_path)
