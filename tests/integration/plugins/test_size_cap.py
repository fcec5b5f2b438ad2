"""A plugin repository over its size cap (``maxSizeMiB``) is refused, with real git worktrees."""

from __future__ import annotations

import json
import os
from pathlib import Path

from plugins_testlib import write_spec
from support.cli import run_cli

from hermes_runtime.plugins import link_plugins

MIB = 1024 * 1024


def test_repository_over_its_cap_is_refused_naming_plugin_size_and_cap(
    data_dir: Path, synced_plugin, tmp_path: Path
) -> None:
    big = synced_plugin("big", sync=False)
    big.repo.commit({"data/blob.txt": "x" * (2 * MIB)})
    sha = big.sync()
    synced_plugin("small")
    spec = write_spec(
        tmp_path / "plugins.yaml",
        [{"name": "big", "maxSizeMiB": 1}, {"name": "small", "maxSizeMiB": 1}],
    )
    args = ("plugins", "link", "--data-dir", str(data_dir), "--spec", str(spec))
    done = run_cli(*args)
    assert done.returncode == 1, done.stderr
    [line] = [x for x in done.stderr.splitlines() if x.startswith("error: plugin big: ")]
    assert f"{data_dir}/.git-sync/big/current -> {sha} holds 2.0 MiB of files" in line, line
    assert "over the plugin's size cap of 1 MiB (maxSizeMiB)" in line, line
    assert not os.path.lexists(data_dir / "plugins" / "big")
    assert (data_dir / "plugins" / "small" / "plugin.yaml").is_file()
    report = json.loads(run_cli(*args, "--json").stdout)
    [failed] = [p for p in report["plugins"] if p["status"] == "failed"]
    assert failed["name"] == "big" and "size cap of 1 MiB" in failed["error"]


def test_commit_growing_past_the_cap_loses_its_link_and_shrinking_links_again(
    data_dir: Path, synced_plugin, tmp_path: Path
) -> None:
    synced = synced_plugin("grows")
    spec = write_spec(tmp_path / "plugins.yaml", [{"name": "grows", "maxSizeMiB": 1}])
    link = data_dir / "plugins" / "grows"
    assert link_plugins(data_dir, spec).ok and link.is_symlink()
    synced.repo.commit({"vendored.txt": "y" * (MIB + 1)})
    synced.sync()
    [refused] = link_plugins(data_dir, spec).results
    assert refused.status == "failed" and "size cap of 1 MiB" in (refused.error or "")
    assert "removed" in (refused.error or "")
    assert not os.path.lexists(link)
    synced.repo.commit({}, remove=("vendored.txt",))
    sha = synced.sync()
    [fixed] = link_plugins(data_dir, spec).results
    assert (fixed.status, fixed.commit) == ("linked", sha)


def test_spec_default_cap_applies_and_a_plugin_may_raise_it(
    data_dir: Path, synced_plugin, tmp_path: Path
) -> None:
    for name in ("capped", "roomy"):
        synced = synced_plugin(name, sync=False)
        synced.repo.commit({"blob.txt": "z" * (2 * MIB)})
        synced.sync()
    spec = tmp_path / "plugins.yaml"
    spec.write_text(
        json.dumps(
            {
                "defaults": {"maxSizeMiB": 1},
                "plugins": [{"name": "capped"}, {"name": "roomy", "maxSizeMiB": 3}],
            }
        )
    )
    results = {r.name: r for r in link_plugins(data_dir, spec).results}
    assert results["capped"].status == "failed"
    assert "size cap of 1 MiB" in (results["capped"].error or "")
    assert results["roomy"].status == "linked", results["roomy"]


def test_symlinks_in_the_repository_are_not_followed_when_measuring(
    data_dir: Path, synced_plugin, tmp_path: Path
) -> None:
    """0.6 MiB of files reached through five links: 3.6 MiB if links were followed."""
    synced = synced_plugin("links", sync=False)
    synced.repo.commit({"assets/blob.txt": "w" * (6 * MIB // 10)})
    for n in range(4):
        synced.repo.symlink(f"copy{n}.txt", "assets/blob.txt")
    synced.repo.symlink("assets-again", "assets")
    synced.repo.commit({})
    sha = synced.sync()
    spec = write_spec(tmp_path / "plugins.yaml", [{"name": "links", "maxSizeMiB": 1}])
    [result] = link_plugins(data_dir, spec).results
    assert (result.status, result.commit, result.error) == ("linked", sha, None)
