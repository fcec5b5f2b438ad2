"""The files the chart seeds are accepted by their real readers.

config.yaml is loaded by Hermes' own config loader (which must expand ${LLM_API_KEY}
from the environment), its `lcm:` section by the LCM engine's settings reader (which
refuses unknown keys), and plugins.yaml plus the git-sync layout the chart asks for
(--root, --link) by the plugin linker, so a renamed key on either side fails here
rather than in a pod.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from chart_testlib import env_map, render

from hermes_runtime.common.errors import RuntimeFailure
from hermes_runtime.lcm.config import LcmConfig
from hermes_runtime.plugins import link_plugins, load_spec

LLM = {"llm": {"baseUrl": "http://llm.internal:8000/v1", "model": "m-1", "existingSecret": "k"}}

HERMES_LOAD = """
import json
from hermes_cli.config import load_config
config = load_config()
print(json.dumps({"model": config.get("model"), "context": config.get("context"),
                  "plugins": config.get("plugins"), "lcm": config.get("lcm")}))
"""


def _hermes_view(config_text: str, home: Path, env: dict[str, str]) -> dict[str, Any]:
    (home / "config.yaml").write_text(config_text)
    done = subprocess.run(
        [sys.executable, "-c", HERMES_LOAD],
        env={**os.environ, **env, "HERMES_HOME": str(home), "HOME": str(home)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    view: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return view


def test_hermes_loads_the_seed_and_takes_the_key_from_the_environment(tmp_path: Path) -> None:
    config_text = render(LLM).configmap_file("config.yaml")
    assert "sk-from-secret" not in config_text
    view = _hermes_view(config_text, tmp_path, {"LLM_API_KEY": "sk-from-secret"})
    assert view["model"]["provider"] == "custom"
    assert view["model"]["base_url"] == "http://llm.internal:8000/v1"
    assert view["model"]["default"] == "m-1"
    assert view["model"]["api_key"] == "sk-from-secret"
    assert view["context"]["engine"] == "lcm"
    assert "lcm" in view["plugins"]["enabled"]


def test_lcm_engine_accepts_the_rendered_section(tmp_path: Path) -> None:
    values = {
        "lcm": {
            "thresholdPercent": 0.8,
            "targetPercent": 0.4,
            "freshTailMessages": 12,
            "embeddings": {"mode": "openai", "model": "embed-1", "dim": 384},
            "extraConfig": {"condense_fanout": 6},
        }
    }
    section = yaml.safe_load(render(values).configmap_file("config.yaml"))["lcm"]
    config = LcmConfig.for_home(tmp_path, section)
    assert config.threshold_percent == 0.8
    assert config.target_percent == 0.4
    assert config.policy.fresh_tail_messages == 12
    assert config.policy.condense_fanout == 6
    assert (config.embeddings, config.embeddings_model, config.embeddings_dim) == (
        "openai",
        "embed-1",
        384,
    )
    defaults = yaml.safe_load(render().configmap_file("config.yaml"))["lcm"]
    assert LcmConfig.for_home(tmp_path, defaults).embeddings == "e5"


def test_a_typo_in_lcm_extra_config_is_caught_by_the_engine(tmp_path: Path) -> None:
    values = {"lcm": {"extraConfig": {"condense_fan_out": 6}}}
    section = yaml.safe_load(render(values).configmap_file("config.yaml"))["lcm"]
    with pytest.raises(RuntimeFailure, match=r"lcm\.condense_fan_out: unknown setting"):
        LcmConfig.for_home(tmp_path, section)


def _git(*args: str, cwd: Path) -> str:
    done = subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@localhost", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    return done.stdout.strip()


def _git_sync_checkout(root: Path, link: str, source: Path) -> None:
    """The layout git-sync v4 leaves behind: a repo at --root, a worktree, --link to it."""
    _git("clone", "-q", str(source), str(root), cwd=source.parent)
    sha = _git("rev-parse", "HEAD", cwd=root)
    _git("worktree", "add", "-q", "--detach", f".worktrees/{sha}", sha, cwd=root)
    (root / link).symlink_to(f".worktrees/{sha}")


def test_plugin_linker_finds_what_git_sync_is_told_to_write(tmp_path: Path) -> None:
    plugins = [
        {"name": "weather", "repo": "https://git.example.com/w.git"},
        {"name": "tickets", "repo": "https://git.example.com/t.git", "subPath": "plugin"},
    ]
    manifest = render({"plugins": plugins})
    data = tmp_path / "data"
    data.mkdir()
    spec_path = tmp_path / "plugins.yaml"
    spec_path.write_text(manifest.configmap_file("plugins.yaml"))
    assert [(e.name, e.sub_path, e.error) for e in load_spec(spec_path)] == [
        ("weather", "", None),
        ("tickets", "plugin", None),
    ]
    for plugin in plugins:
        source = tmp_path / f"src-{plugin['name']}"
        tree = source / plugin.get("subPath", "")
        tree.mkdir(parents=True)
        (tree / "plugin.yaml").write_text(f"name: {plugin['name']}\nversion: '1'\n")
        (tree / "__init__.py").write_text("def register(ctx):\n    pass\n")
        _git("init", "-q", "-b", "main", cwd=source)
        _git("add", "-A", cwd=source)
        _git("commit", "-q", "-m", "plugin", cwd=source)
        env = env_map(manifest.container(f"git-sync-{plugin['name']}"))
        root = Path(env["GITSYNC_ROOT"].replace("/opt/data", str(data), 1))
        _git_sync_checkout(root, env["GITSYNC_LINK"], source)

    report = link_plugins(data, spec_path)
    assert report.ok, report.results
    assert (data / "plugins" / "weather" / "plugin.yaml").is_file()
    assert (data / "plugins" / "tickets" / "plugin.yaml").is_file()
    assert not os.path.isabs(os.readlink(data / "plugins" / "weather"))
