"""The gateway's ``sys.path`` step: each linked plugin's installed packages, after everything.

The rule: a plugin's packages are appended to ``sys.path``, never inserted before it. Python
imports a top-level name from the first entry that has it, so every module of the image
(Hermes', ours, the standard library, site-packages) is found before a plugin's copy: a plugin
can add modules but never replace one the gateway already has. Plugins come in the order of
their names; when two ship the same module, the first name's wins. ``.pth`` files in a target
are not run (``site.addsitedir`` is not used): a package's install must not execute code at
every gateway start.
"""

from __future__ import annotations

from pathlib import Path

from hermes_runtime.plugins.deps import linked_targets
from hermes_runtime.plugins.layout import Layout, owned_link_target


def plugin_package_paths(data_dir: Path) -> list[Path]:
    """The installed target of every plugin we linked in ``D/plugins``, by plugin name.

    What the link names is what Hermes imports, so its ``requirements.txt`` picks the target.
    """
    plugins_dir = Layout(Path(data_dir)).plugins_dir
    try:
        entries = sorted(plugins_dir.iterdir(), key=lambda entry: entry.name)
    except OSError:
        return []
    links = [(entry.name, entry) for entry in entries if owned_link_target(entry) is not None]
    return linked_targets(Path(data_dir), links)


def append_plugin_packages(data_dir: Path, path: list[str]) -> list[str]:
    """Append each target to ``path`` (``sys.path``) unless already there; return those added."""
    added: list[str] = []
    for target in plugin_package_paths(data_dir):
        entry = str(target)
        if entry not in path:
            path.append(entry)
            added.append(entry)
    return added
