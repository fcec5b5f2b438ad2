"""Plugins with Python dependencies: ``plugins install-deps`` against a real index (pypiserver),
then the linker, then a real gateway process's ``sys.path`` and Hermes' own plugin loader."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from deps_testlib import PackageIndex, serve_index
from plugins_testlib import GitSyncLike, PluginRepo, plugin_files, write_spec
from support.cli import run_cli
from support.wait import wait_until
from support.wheels import build_wheel, file_hash, module_wheel
from tls_front import private_authority, tls_front

from hermes_runtime.plugins import LinkReport, link_plugins, watch_links

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def index(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PackageIndex]:
    """One index for the module: the wheels each test pins, built here."""
    root = tmp_path_factory.mktemp("index")
    module_wheel(root, "tinydep", "1.0")
    module_wheel(root, "tinydep", "2.0")
    module_wheel(root, "winonly", "1.0", tag="py3-none-win_amd64")
    shadow = {
        "hermes_cli/__init__.py": "SHADOW = True\n",
        "shadowpkg/__init__.py": "VALUE = 'shadowpkg 1.0'\n",
    }
    build_wheel(root, "shadowpkg", "1.0", shadow)
    requires_dep = {"needsdep/__init__.py": "import tinydep\n"}
    build_wheel(root, "needsdep", "1.0", requires_dep, requires=("tinydep==1.0",))
    with serve_index(root, tmp_path_factory.mktemp("index-log") / "pypiserver.log") as served:
        yield served


def pin(index: PackageIndex, name: str, version: str, tag: str = "py3-none-any") -> str:
    wheel = index.root / f"{name}-{version}-{tag}.whl"
    return f"{name}=={version} --hash={file_hash(wheel)}\n"


def plugin_using(name: str, module: str, requirements: str, version: str = "1") -> dict[str, str]:
    """A plugin whose register() records the declared module's VALUE: it imported it."""
    files = plugin_files(name, version)
    files["__init__.py"] = textwrap.dedent(
        f"""
        import os
        from pathlib import Path

        import {module}

        def register(ctx):
            home = Path(os.environ["HERMES_HOME"])
            with open(home / "plugin-deps.log", "a") as fh:
                fh.write(f"{name} {{{module}.VALUE}}\\n")
        """
    )
    files["requirements.txt"] = requirements
    return files


@pytest.fixture
def plugin_with(
    data_dir: Path, make_repo: Callable[[str], PluginRepo]
) -> Callable[[str, dict[str, str]], GitSyncLike]:
    def _make(name: str, files: dict[str, str]) -> GitSyncLike:
        repo = make_repo(name)
        repo.commit(files)
        syncer = GitSyncLike(repo, data_dir / ".git-sync" / name)
        syncer.sync()
        return syncer

    return _make


def install_deps(
    data_dir: Path, spec: Path, index: PackageIndex, *options: str
) -> subprocess.CompletedProcess[str]:
    return run_cli(
        "plugins",
        "install-deps",
        "--data-dir",
        str(data_dir),
        "--spec",
        str(spec),
        *options,
        env={"HERMES_RUNTIME_PLUGIN_INDEX_URL": index.url},
        timeout=300,
    )


PROBE = """
import json, sys
from hermes_cli.plugins import get_plugin_manager
manager = get_plugin_manager()
manager.discover_and_load()
import hermes_cli
found = {}
for name in ("tinydep", "shadowpkg"):
    try:
        found[name] = __import__(name).__file__
    except ImportError:
        found[name] = None
print(json.dumps({"path": sys.path, "hermes_cli": hermes_cli.__file__,
                  "shadowed": hasattr(hermes_cli, "SHADOW"), "found": found}))
"""


def run_gateway_main(data_dir: Path, tmp_path: Path) -> dict[str, object]:
    """``python -m hermes_runtime.agent.gateway_main probe``, as the entrypoint starts Hermes:
    the probe module stands in for ``hermes_cli.main`` and loads the plugins as Hermes does."""
    probe_dir = tmp_path / "probe"
    probe_dir.mkdir(exist_ok=True)
    (probe_dir / "deps_probe.py").write_text(PROBE)
    env = {**os.environ, "HERMES_HOME": str(data_dir), "PYTHONPATH": str(probe_dir)}
    result = subprocess.run(
        [sys.executable, "-m", "hermes_runtime.agent.gateway_main", "deps_probe"],
        capture_output=True,
        text=True,
        env=env,
        cwd=data_dir,
        check=False,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_a_declared_package_is_installed_and_imported_by_the_plugin_in_the_gateway(
    data_dir: Path, plugin_with, index: PackageIndex, tmp_path: Path
) -> None:
    plugin_with("weather", plugin_using("weather", "tinydep", pin(index, "tinydep", "1.0")))
    spec = write_spec(tmp_path / "plugins.yaml", [{"name": "weather"}])
    installed = install_deps(data_dir, spec, index)
    assert installed.returncode == 0, installed.stderr
    assert installed.stdout.startswith("installed weather ")
    [target] = [p for p in (data_dir / ".plugin-packages" / "weather").iterdir() if p.is_dir()]
    assert (target / "tinydep" / "__init__.py").is_file()
    state = json.loads((data_dir / ".plugin-packages" / "weather" / "state.json").read_text())
    assert state["status"] == "installed" and state["requirements_sha256"] == target.name

    report = link_plugins(data_dir, spec)
    assert report.ok, report.to_dict()
    assert report.results[0].packages == str(target)

    seen = run_gateway_main(data_dir, tmp_path)
    assert (data_dir / "plugin-deps.log").read_text() == "weather tinydep 1.0\n"
    assert seen["path"][-1] == str(target)  # type: ignore[index]
    assert seen["found"]["tinydep"] == str(target / "tinydep" / "__init__.py")  # type: ignore[index]


def test_a_plugin_package_never_replaces_a_module_the_gateway_has(
    data_dir: Path, plugin_with, index: PackageIndex, tmp_path: Path
) -> None:
    """shadowpkg's wheel also ships ``hermes_cli``: appended after site-packages, Hermes' wins."""
    plugin_with("shadow", plugin_using("shadow", "shadowpkg", pin(index, "shadowpkg", "1.0")))
    spec = write_spec(tmp_path / "plugins.yaml", [{"name": "shadow"}])
    assert install_deps(data_dir, spec, index).returncode == 0
    assert link_plugins(data_dir, spec).ok
    [target] = [p for p in (data_dir / ".plugin-packages" / "shadow").iterdir() if p.is_dir()]
    assert (target / "hermes_cli" / "__init__.py").is_file()  # it is there, and loses
    seen = run_gateway_main(data_dir, tmp_path)
    assert seen["shadowed"] is False
    assert not str(seen["hermes_cli"]).startswith(str(target))
    assert seen["found"]["shadowpkg"] == str(target / "shadowpkg" / "__init__.py")  # type: ignore[index]
    assert (data_dir / "plugin-deps.log").read_text() == "shadow shadowpkg 1.0\n"


REFUSALS = {
    "no-hash": ("tinydep==1.0\n", "tinydep", "has no --hash"),
    "not-on-index": (
        "absentpkg==1.0 --hash=sha256:" + "0" * 64 + "\n",
        "absentpkg",
        "not on the index http://127.0.0.1",
    ),
    "other-platform": (None, "winonly", "no wheel for this platform"),
    "unpinned-dependency": (None, "tinydep", "not pinned with a --hash in the file"),
}


@pytest.mark.parametrize("case", sorted(REFUSALS))
def test_refused_packages_leave_the_plugin_unlinked_naming_plugin_and_package(
    case: str, data_dir: Path, plugin_with, index: PackageIndex, tmp_path: Path
) -> None:
    requirements, package, reason = REFUSALS[case]
    if case == "other-platform":
        requirements = pin(index, "winonly", "1.0", tag="py3-none-win_amd64")
    elif case == "unpinned-dependency":
        requirements = pin(index, "needsdep", "1.0")  # needs tinydep, which is not pinned
    assert requirements is not None
    plugin_with("bad", plugin_using("bad", package, requirements))
    plugin_with("good", plugin_files("good", "1"))
    spec = write_spec(tmp_path / "plugins.yaml", [{"name": "bad"}, {"name": "good"}])

    result = install_deps(data_dir, spec, index)
    assert result.returncode == 1
    [error] = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert error.startswith(f"error: plugin bad: package {package}: "), error
    assert reason in error
    assert "none      good" in result.stdout
    assert not [p for p in (data_dir / ".plugin-packages" / "bad").iterdir() if p.is_dir()]

    report = link_plugins(data_dir, spec)
    bad, good = report.results
    assert (bad.status, good.status) == ("failed", "linked")
    assert bad.error is not None and package in bad.error and reason in bad.error
    assert not os.path.lexists(data_dir / "plugins" / "bad")
    assert "- bad" not in (data_dir / "config.yaml").read_text()


def test_packages_over_the_size_cap_are_refused_and_nothing_is_kept(
    data_dir: Path, plugin_with, index: PackageIndex, tmp_path: Path
) -> None:
    """The cap counts what pip installed; a plugin over it is not linked, with its size said.
    The same packages under a cap they fit are installed and linked."""
    synced = plugin_with("big", plugin_using("big", "shadowpkg", pin(index, "shadowpkg", "1.0")))
    spec = write_spec(tmp_path / "plugins.yaml", [{"name": "big"}])
    refused = install_deps(data_dir, spec, index, "--max-size-mib", "0.001")
    assert refused.returncode == 2, refused.stderr  # a whole number of MiB, as --help says
    huge = {"blob/__init__.py": "", "blob/data.bin": "x" * (2 << 20)}
    build_wheel(index.root, "blob", "1.0", huge)
    synced.repo.commit(plugin_using("big", "blob", pin(index, "blob", "1.0"), version="2"))
    synced.sync(remove_old=True)

    result = install_deps(data_dir, spec, index, "--max-size-mib", "1")
    assert result.returncode == 1, result.stdout
    [error] = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert error.startswith("error: plugin big: the installed packages take 2."), error
    assert "over the cap of 1 MiB (--max-size-mib" in error
    assert not [p for p in (data_dir / ".plugin-packages" / "big").iterdir() if p.is_dir()]
    [report] = link_plugins(data_dir, spec).results
    assert report.status == "failed" and "over the cap" in (report.error or "")

    assert install_deps(data_dir, spec, index, "--max-size-mib", "3").returncode == 0
    [linked] = link_plugins(data_dir, spec).results
    assert linked.status == "linked", linked.error


def test_an_index_behind_a_private_ca_is_trusted_with_its_bundle_and_only_then(
    data_dir: Path, plugin_with, index: PackageIndex, tmp_path: Path
) -> None:
    plugin_with("tls", plugin_using("tls", "tinydep", pin(index, "tinydep", "1.0")))
    spec = write_spec(tmp_path / "plugins.yaml", [{"name": "tls"}])
    authority = private_authority(tmp_path / "authority")
    with tls_front(urlsplit(index.url).port or 80, authority) as port:
        https = PackageIndex(f"https://127.0.0.1:{port}/simple", index.root)
        untrusted = install_deps(data_dir, spec, https)
        assert untrusted.returncode == 1, untrusted.stdout
        [error] = [line for line in untrusted.stderr.splitlines() if line.startswith("error:")]
        assert error.startswith(f"error: plugin tls: the index {https.url} presented a TLS"), error
        assert "--index-ca" in error and "pluginPackages.caSecret" in error

        trusted = install_deps(data_dir, spec, https, "--index-ca", str(authority.ca_pem))
        assert trusted.returncode == 0, trusted.stderr
    [linked] = link_plugins(data_dir, spec).results
    assert linked.status == "linked", linked.error

    for bundle, says in ((tmp_path / "absent.crt", "No such file"), (spec, "no PEM certificate")):
        wrong = install_deps(data_dir, spec, index, "--index-ca", str(bundle))
        assert wrong.returncode == 1
        assert f"--index-ca {bundle}: {says}" in wrong.stderr, wrong.stderr


def test_not_installed_yet_waits_and_is_linked_once_installed(
    data_dir: Path, plugin_with, index: PackageIndex, tmp_path: Path
) -> None:
    plugin_with("later", plugin_using("later", "tinydep", pin(index, "tinydep", "1.0")))
    spec = write_spec(tmp_path / "plugins.yaml", [{"name": "later"}])
    [early] = link_plugins(data_dir, spec).results
    assert early.status == "failed" and "not installed yet" in (early.error or "")
    assert not os.path.lexists(data_dir / "plugins" / "later")
    assert install_deps(data_dir, spec, index).returncode == 0
    [late] = link_plugins(data_dir, spec).results
    assert late.status == "linked" and late.packages is not None


def test_packages_are_installed_again_only_when_the_requirements_change(
    data_dir: Path, plugin_with, index: PackageIndex, tmp_path: Path
) -> None:
    synced = plugin_with("evolve", plugin_using("evolve", "tinydep", pin(index, "tinydep", "1.0")))
    spec = write_spec(tmp_path / "plugins.yaml", [{"name": "evolve"}])
    packages = data_dir / ".plugin-packages" / "evolve"
    assert install_deps(data_dir, spec, index).returncode == 0
    assert link_plugins(data_dir, spec).ok
    [first] = [p for p in packages.iterdir() if p.is_dir()]
    first_inode = first.stat().st_ino

    # A commit that changes the code, not requirements.txt: nothing is installed again.
    synced.repo.commit({"README.md": "docs only\n"})
    synced.sync(remove_old=True)
    again = install_deps(data_dir, spec, index)
    assert again.returncode == 0 and again.stdout.startswith("unchanged evolve ")
    assert first.stat().st_ino == first_inode
    assert link_plugins(data_dir, spec).ok

    # A commit that changes requirements.txt: a new target; the linked one stays until relinked.
    synced.repo.commit(plugin_using("evolve", "tinydep", pin(index, "tinydep", "2.0"), "2"))
    synced.sync(remove_old=True)
    changed = install_deps(data_dir, spec, index)
    assert changed.returncode == 0 and changed.stdout.startswith("installed evolve ")
    targets = sorted(p.name for p in packages.iterdir() if p.is_dir())
    assert len(targets) == 2 and first.name in targets
    assert link_plugins(data_dir, spec).ok
    assert install_deps(data_dir, spec, index).stdout.startswith("unchanged evolve ")
    [second] = [p for p in packages.iterdir() if p.is_dir()]
    assert second.name != first.name
    assert run_gateway_main(data_dir, tmp_path)["found"]["tinydep"] == str(  # type: ignore[index]
        second / "tinydep" / "__init__.py"
    )
    assert (data_dir / "plugin-deps.log").read_text() == "evolve tinydep 2.0\n"


def test_json_output_and_a_missing_index_setting(
    data_dir: Path, plugin_with, index: PackageIndex, tmp_path: Path
) -> None:
    plugin_with("noindex", plugin_using("noindex", "tinydep", pin(index, "tinydep", "1.0")))
    spec = write_spec(tmp_path / "plugins.yaml", [{"name": "noindex"}])
    env = {"HERMES_RUNTIME_PLUGIN_INDEX_URL": ""}
    args = ("plugins", "install-deps", "--data-dir", str(data_dir), "--spec", str(spec), "--json")
    result = run_cli(*args, env=env)
    assert result.returncode == 1
    payload = json.loads(result.stdout)
    assert payload["ok"] is False
    assert "HERMES_RUNTIME_PLUGIN_INDEX_URL" in payload["plugins"][0]["error"]
    ok = run_cli(*args, "--index-url", index.url, env=env, timeout=300)
    assert ok.returncode == 0, ok.stderr
    assert json.loads(ok.stdout)["plugins"][0]["status"] == "installed"


def test_the_watcher_links_a_waiting_plugin_as_soon_as_its_install_finishes(
    data_dir: Path, plugin_with, index: PackageIndex, tmp_path: Path
) -> None:
    """No commit and no spec change: the finished install alone (``state.json``) relinks."""
    plugin_with("waits", plugin_using("waits", "tinydep", pin(index, "tinydep", "1.0")))
    spec = write_spec(tmp_path / "plugins.yaml", [{"name": "waits"}])
    baseline = link_plugins(data_dir, spec)
    assert baseline.results[0].status == "failed"
    calls: list[LinkReport] = []
    stop = threading.Event()
    thread = threading.Thread(
        target=watch_links,
        args=(data_dir, spec, calls.append, stop),
        kwargs={"interval": 0.05, "baseline": baseline},
    )
    thread.start()
    try:
        time.sleep(0.5)
        assert calls == []
        assert install_deps(data_dir, spec, index).returncode == 0
        wait_until(lambda: len(calls) == 1, timeout=10)
        assert calls[0].results[0].status == "linked"
        assert os.path.lexists(data_dir / "plugins" / "waits")
    finally:
        stop.set()
        thread.join(timeout=10)


def test_install_deps_watch_installs_a_pushed_change_and_stops_on_sigterm(
    data_dir: Path, plugin_with, index: PackageIndex, tmp_path: Path
) -> None:
    synced = plugin_with("pushed", plugin_using("pushed", "tinydep", pin(index, "tinydep", "1.0")))
    spec = write_spec(tmp_path / "plugins.yaml", [{"name": "pushed"}])
    command = [
        sys.executable, "-m", "hermes_runtime", "plugins", "install-deps", "--watch",
        "--interval", "0.2", "--json", "--data-dir", str(data_dir), "--spec", str(spec),
        "--index-url", index.url,
    ]  # fmt: skip
    lines: list[dict[str, object]] = []
    with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as p:
        reader = threading.Thread(
            target=lambda: lines.extend(json.loads(line) for line in p.stdout or ()), daemon=True
        )
        reader.start()
        try:
            wait_until(lambda: len(lines) == 1, timeout=60)
            synced.repo.commit({"requirements.txt": pin(index, "tinydep", "2.0")})
            synced.sync()
            wait_until(lambda: len(lines) == 2, timeout=60)
        finally:
            p.terminate()
            assert p.wait(timeout=30) == 0, p.stderr.read() if p.stderr else ""
    first, second = (payload["plugins"] for payload in lines)
    assert [r["status"] for r in first + second] == ["installed", "installed"]  # type: ignore[operator, index]
    assert first[0]["requirements_sha256"] != second[0]["requirements_sha256"]  # type: ignore[index]
