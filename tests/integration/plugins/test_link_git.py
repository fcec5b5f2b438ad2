"""``plugins link`` against real git repositories in a git-sync-shaped layout."""

from __future__ import annotations

import os
import threading
from pathlib import Path

from plugins_testlib import GitSyncLike, plugin_files, write_spec
from support.cli import run_cli

from hermes_runtime.common.errors import RuntimeFailure
from hermes_runtime.plugins import link_plugins


def test_links_the_checked_worktree_relative_and_enables(
    data_dir: Path, synced_plugin, tmp_path: Path
) -> None:
    synced = synced_plugin("weather")
    spec = write_spec(tmp_path / "plugins.yaml", [{"name": "weather"}])
    report = link_plugins(data_dir, spec)
    assert report.ok, report.to_dict()
    link = data_dir / "plugins" / "weather"
    sha = synced.current_sha()
    assert os.readlink(link) == f"../.git-sync/weather/.worktrees/{sha}"
    assert (link / "plugin.yaml").is_file()
    [result] = report.results
    assert result.status == "linked"
    assert result.commit == sha
    assert "- weather" in (data_dir / "config.yaml").read_text()


def test_a_new_commit_is_visible_only_once_it_passed(
    data_dir: Path, synced_plugin, tmp_path: Path
) -> None:
    """git-sync swaps ``current`` before anything checked the commit: the link must not follow."""
    synced = synced_plugin("tools", sub_path="plugins/tools")
    spec = write_spec(tmp_path / "plugins.yaml", [{"name": "tools", "subPath": "plugins/tools/"}])
    assert link_plugins(data_dir, spec).ok
    link = data_dir / "plugins" / "tools"
    first = synced.current_sha()
    assert os.readlink(link) == f"../.git-sync/tools/.worktrees/{first}/plugins/tools"
    synced.repo.commit({f"plugins/tools/{k}": v for k, v in plugin_files("tools", "2").items()})
    second_sha = synced.sync()
    assert "VERSION = '1'" in (link / "__init__.py").read_text()  # not checked yet
    second = link_plugins(data_dir, spec)
    assert [(r.status, r.commit) for r in second.results] == [("linked", second_sha)]
    assert second.changed
    assert os.readlink(link) == f"../.git-sync/tools/.worktrees/{second_sha}/plugins/tools"
    assert "VERSION = '2'" in (link / "__init__.py").read_text()
    third = link_plugins(data_dir, spec)
    assert [r.status for r in third.results] == ["unchanged"] and not third.changed


def test_after_git_sync_deletes_the_old_worktree_the_link_dangles_until_relinked(
    data_dir: Path, synced_plugin, tmp_path: Path
) -> None:
    """What a gateway starting between git-sync's swap and our check sees: no plugin, never
    the unchecked commit; the next convergence links the new one."""
    synced = synced_plugin("gone")
    spec = write_spec(tmp_path / "plugins.yaml", [{"name": "gone"}])
    assert link_plugins(data_dir, spec).ok
    link = data_dir / "plugins" / "gone"
    synced.repo.commit(plugin_files("gone", "2"))
    sha = synced.sync(remove_old=True)
    assert link.is_symlink() and not link.exists()
    [result] = link_plugins(data_dir, spec).results
    assert (result.status, result.commit) == ("linked", sha)
    assert "VERSION = '2'" in (link / "__init__.py").read_text()


def test_current_that_is_not_a_symlink_is_refused(
    data_dir: Path, synced_plugin, tmp_path: Path
) -> None:
    synced = synced_plugin("flat", sync=False)
    (synced.root / "current").mkdir(parents=True)
    for name, text in plugin_files("flat", "1").items():
        (synced.root / "current" / name).write_text(text)
    spec = write_spec(tmp_path / "plugins.yaml", [{"name": "flat"}])
    [result] = link_plugins(data_dir, spec).results
    assert result.status == "failed" and "is not a symlink" in (result.error or "")
    assert not os.path.lexists(data_dir / "plugins" / "flat")


def test_second_run_changes_nothing(data_dir: Path, synced_plugin, tmp_path: Path) -> None:
    synced_plugin("a")
    synced_plugin("b")
    spec = write_spec(tmp_path / "plugins.yaml", [{"name": "a"}, {"name": "b", "enabled": False}])
    assert link_plugins(data_dir, spec).changed
    config_before = (data_dir / "config.yaml").stat()
    links_before = {p.name: p.lstat().st_ino for p in (data_dir / "plugins").iterdir()}
    again = link_plugins(data_dir, spec)
    assert not again.changed and again.ok
    assert (data_dir / "config.yaml").stat().st_mtime_ns == config_before.st_mtime_ns
    assert {p.name: p.lstat().st_ino for p in (data_dir / "plugins").iterdir()} == links_before


def test_one_bad_plugin_does_not_stop_the_others(
    data_dir: Path, synced_plugin, tmp_path: Path
) -> None:
    synced_plugin("good")
    bad = synced_plugin("nomanifest")
    bad.repo.commit({}, remove=("plugin.yaml",))
    bad.sync()
    spec = write_spec(
        tmp_path / "plugins.yaml",
        [{"name": "nomanifest"}, {"name": "Bad Name"}, {"name": "good"}, {"name": "never-synced"}],
    )
    result = run_cli("plugins", "link", "--data-dir", str(data_dir), "--spec", str(spec), "--json")
    assert result.returncode == 1, result.stderr
    assert (data_dir / "plugins" / "good").is_symlink()
    assert not (data_dir / "plugins" / "nomanifest").exists()
    out = result.stdout
    assert "has no plugin.yaml" in out
    assert "field 'name' must match" in out
    assert "git-sync has not synced yet" in out
    enabled = (data_dir / "config.yaml").read_text()
    assert "- good" in enabled and "nomanifest" not in enabled


def test_user_owned_entries_are_never_touched(
    data_dir: Path, synced_plugin, tmp_path: Path
) -> None:
    synced_plugin("mine")
    synced_plugin("theirs")
    plugins = data_dir / "plugins"
    plugins.mkdir()
    (plugins / "mine").mkdir()
    (plugins / "mine" / "plugin.yaml").write_text("name: mine\n")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    os.symlink(str(elsewhere), plugins / "theirs")
    os.symlink(str(elsewhere), plugins / "hand-made")
    spec = write_spec(tmp_path / "plugins.yaml", [{"name": "mine"}, {"name": "theirs"}])
    report = link_plugins(data_dir, spec)
    assert not report.ok
    assert {r.name for r in report.failures} == {"mine", "theirs"}
    assert all("belongs to the user" in (r.error or "") for r in report.failures)
    assert (plugins / "mine").is_dir() and not (plugins / "mine").is_symlink()
    assert os.readlink(plugins / "theirs") == str(elsewhere)
    assert os.readlink(plugins / "hand-made") == str(elsewhere)


def test_stale_links_are_removed_and_disabled(
    data_dir: Path, synced_plugin, tmp_path: Path
) -> None:
    synced_plugin("keep")
    synced_plugin("gone")
    spec = tmp_path / "plugins.yaml"
    write_spec(spec, [{"name": "keep"}, {"name": "gone"}])
    assert link_plugins(data_dir, spec).ok
    config = data_dir / "config.yaml"
    config.write_text(config.read_text() + "# user note\n")
    write_spec(spec, [{"name": "keep"}])
    report = link_plugins(data_dir, spec)
    assert {r.name: r.status for r in report.results} == {"keep": "unchanged", "gone": "removed"}
    assert not os.path.lexists(data_dir / "plugins" / "gone")
    text = config.read_text()
    assert "gone" not in text and "- keep" in text and "# user note" in text


def test_bad_yaml_spec_names_the_line_and_changes_nothing(
    data_dir: Path, synced_plugin, tmp_path: Path
) -> None:
    synced_plugin("keep")
    spec = tmp_path / "plugins.yaml"
    write_spec(spec, [{"name": "keep"}])
    assert link_plugins(data_dir, spec).ok
    before = sorted(os.listdir(data_dir / "plugins")), (data_dir / "config.yaml").read_text()
    spec.write_text("plugins:\n  - name: keep\n  - name: [unclosed\n")
    result = run_cli("plugins", "link", "--data-dir", str(data_dir), "--spec", str(spec))
    assert result.returncode == 1
    assert f"plugin spec {spec} line" in result.stderr
    after = sorted(os.listdir(data_dir / "plugins")), (data_dir / "config.yaml").read_text()
    assert after == before


def test_unreadable_spec_is_an_error(data_dir: Path, tmp_path: Path) -> None:
    spec = tmp_path / "plugins.yaml"
    spec.mkdir()
    result = run_cli("plugins", "link", "--data-dir", str(data_dir), "--spec", str(spec))
    assert result.returncode == 1
    assert str(spec) in result.stderr and "cannot read" in result.stderr
    assert not (data_dir / "plugins").exists()


def test_wait_for_first_sync(data_dir: Path, synced_plugin, tmp_path: Path) -> None:
    synced = synced_plugin("late", sync=False)
    spec = write_spec(tmp_path / "plugins.yaml", [{"name": "late"}])
    timer = threading.Timer(0.5, synced.sync)
    timer.start()
    try:
        report = link_plugins(data_dir, spec, wait_seconds=30)
    finally:
        timer.join()
    assert report.ok, report.to_dict()


def test_swap_of_current_while_linking_links_a_consistent_commit(
    data_dir: Path, synced_plugin, tmp_path: Path
) -> None:
    synced: GitSyncLike = synced_plugin("busy")
    shas = [synced.sync()]
    for version in ("2", "3"):
        synced.repo.commit(plugin_files("busy", version))
        shas.append(synced.sync())
    spec = write_spec(tmp_path / "plugins.yaml", [{"name": "busy"}])
    stop = threading.Event()

    def flip() -> None:
        i = 0
        while not stop.is_set():
            synced.point_current_at(f".worktrees/{shas[i % 3]}")
            i += 1

    flipper = threading.Thread(target=flip)
    flipper.start()
    try:
        reports = [link_plugins(data_dir, spec) for _ in range(20)]
    finally:
        stop.set()
        flipper.join()
    for report in reports:
        [result] = report.results
        if result.status == "failed":
            assert "kept changing" in (result.error or ""), result.error
        else:
            assert result.commit in shas
    assert any(r.ok for r in reports)
    last = [r.results[0].commit for r in reports if r.ok][-1]
    assert os.readlink(data_dir / "plugins" / "busy") == f"../.git-sync/busy/.worktrees/{last}"


def test_subpath_escape_attempts_are_rejected(
    data_dir: Path, synced_plugin, tmp_path: Path
) -> None:
    synced = synced_plugin("esc")
    outside = tmp_path / "outside-plugin"
    outside.mkdir()
    for name, text in plugin_files("esc", "evil").items():
        (outside / name).write_text(text)
    synced.repo.symlink("linked-out", str(outside))
    synced.repo.symlink("relative-out", "../../../../outside-plugin")
    synced.repo.commit({})
    synced.sync()
    cases = ["../..", "/etc", "a/../../b", ".git", "linked-out", "relative-out"]
    spec = tmp_path / "plugins.yaml"
    for case in cases:
        write_spec(spec, [{"name": "esc", "subPath": case}])
        report = link_plugins(data_dir, spec)
        assert not report.ok, case
        assert not os.path.lexists(data_dir / "plugins" / "esc"), case


def test_symlink_inside_plugin_pointing_outside_is_rejected(
    data_dir: Path, synced_plugin, tmp_path: Path
) -> None:
    synced = synced_plugin("leaky")
    secret = tmp_path / "secret.txt"
    secret.write_text("s3cret")
    synced.repo.symlink("data/secret", str(secret))
    synced.repo.commit({})
    synced.sync()
    spec = write_spec(tmp_path / "plugins.yaml", [{"name": "leaky"}])
    report = link_plugins(data_dir, spec)
    [result] = report.results
    assert result.status == "failed"
    assert "data/secret" in (result.error or "") and "outside" in (result.error or "")


def test_a_refused_commit_loses_its_link_and_a_good_one_links_again(
    data_dir: Path, synced_plugin, tmp_path: Path
) -> None:
    synced = synced_plugin("turncoat")
    spec = write_spec(tmp_path / "plugins.yaml", [{"name": "turncoat"}])
    link = data_dir / "plugins" / "turncoat"
    assert link_plugins(data_dir, spec).ok and (link / "plugin.yaml").is_file()
    # git-sync swaps `current` to a commit that escapes: the link must not keep pointing
    # through it, or the next gateway start would load it.
    secret = tmp_path / "secret.txt"
    secret.write_text("s3cret")
    synced.repo.symlink("data/secret", str(secret))
    synced.repo.commit({})
    synced.sync()
    # Before any check: a gateway start now would still load the commit that passed.
    assert not os.path.lexists(link / "data" / "secret")
    [refused] = link_plugins(data_dir, spec).results
    assert refused.status == "failed" and "outside" in (refused.error or "")
    assert "removed" in (refused.error or "")
    assert not os.path.lexists(link)
    # The author reverts: the plugin is linked again.
    synced.repo.commit({}, remove=("data/secret",))
    sha = synced.sync()
    [fixed] = link_plugins(data_dir, spec).results
    assert fixed.status == "linked", fixed
    assert os.readlink(link) == f"../.git-sync/turncoat/.worktrees/{sha}"


def test_current_pointing_outside_the_sync_root_is_rejected(
    data_dir: Path, synced_plugin, tmp_path: Path
) -> None:
    synced = synced_plugin("hijack")
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    for name, text in plugin_files("hijack", "x").items():
        (foreign / name).write_text(text)
    synced.point_current_at(str(foreign))
    spec = write_spec(tmp_path / "plugins.yaml", [{"name": "hijack"}])
    [result] = link_plugins(data_dir, spec).results
    assert result.status == "failed" and "outside" in (result.error or "")


def test_bad_config_yaml_changes_nothing(data_dir: Path, synced_plugin, tmp_path: Path) -> None:
    synced_plugin("p")
    (data_dir / "config.yaml").write_text("plugins: [unclosed\n")
    spec = write_spec(tmp_path / "plugins.yaml", [{"name": "p"}])
    try:
        link_plugins(data_dir, spec)
    except RuntimeFailure as exc:
        assert "config.yaml" in str(exc)
    else:
        raise AssertionError("a config.yaml that does not parse must be an error")
    assert not (data_dir / "plugins").exists()


def test_sync_root_that_is_a_symlink_is_rejected(
    data_dir: Path, synced_plugin, tmp_path: Path
) -> None:
    synced = synced_plugin("real")
    os.symlink(str(synced.root), data_dir / ".git-sync" / "alias")
    spec = write_spec(tmp_path / "plugins.yaml", [{"name": "alias"}])
    [result] = link_plugins(data_dir, spec).results
    assert result.status == "failed" and "is a symlink" in (result.error or "")
    assert not os.path.lexists(data_dir / "plugins" / "alias")


def test_json_report_and_exit_status(data_dir: Path, synced_plugin, tmp_path: Path) -> None:
    import json

    synced_plugin("ok")
    spec = write_spec(tmp_path / "plugins.yaml", [{"name": "ok"}])
    args = ("plugins", "link", "--data-dir", str(data_dir), "--spec", str(spec), "--json")
    first = run_cli(*args)
    assert first.returncode == 0, first.stderr
    payload = json.loads(first.stdout)
    assert payload["ok"] and payload["changed"]
    assert payload["plugins"][0]["status"] == "linked"
    second = json.loads(run_cli(*args).stdout)
    assert second["changed"] is False and second["plugins"][0]["status"] == "unchanged"
