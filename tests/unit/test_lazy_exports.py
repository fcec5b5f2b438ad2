"""Packages whose names load on first use (``common/lazyexports.py``): the lists agree, every
name resolves, and the agent's entrypoint loads none of the modules it does not use."""

from __future__ import annotations

import ast
import importlib
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2] / "hermes_runtime"
LAZY = ["hermes_runtime.backup", "hermes_runtime.plugins", "hermes_runtime.vault"]
# What the entrypoint must not hold: it reads status records and env files, nothing more.
NOT_IN_ENTRYPOINT = ["boto3", "hvac", "httpx", "requests", "rich", "hermes_runtime.backup.restic"]


def type_checking_imports(package: str) -> dict[str, str]:
    """Name -> home module (relative) of every import under ``if TYPE_CHECKING:``."""
    path = ROOT.joinpath(*package.split(".")[1:], "__init__.py")
    found: dict[str, str] = {}
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING":
            for item in node.body:
                assert isinstance(item, ast.ImportFrom) and item.module, ast.unparse(item)
                home = item.module.removeprefix(f"{package}.")
                found.update({alias.name: home for alias in item.names})
    return found


def test_every_lazy_package_is_listed() -> None:
    uses = {
        ".".join(path.relative_to(ROOT.parent).parent.parts)
        for path in ROOT.rglob("__init__.py")
        if "lazy_exports(" in path.read_text()
    }
    assert uses == set(LAZY)


@pytest.mark.parametrize("package", LAZY)
def test_the_homes_the_all_and_the_typed_imports_agree(package: str) -> None:
    module = importlib.import_module(package)
    homes = module._HOMES
    assert sorted(homes) == sorted(module.__all__)
    assert type_checking_imports(package) == homes
    for name, home in homes.items():
        defined = getattr(importlib.import_module(f"{package}.{home}"), name)
        assert getattr(module, name) is defined, name


@pytest.mark.parametrize("package", LAZY)
def test_an_unknown_name_is_an_attribute_error_naming_the_package(package: str) -> None:
    module = importlib.import_module(package)
    with pytest.raises(AttributeError, match=f"module '{package}' has no attribute 'nope'"):
        _ = module.nope


def test_the_agent_entrypoint_loads_no_module_it_does_not_use() -> None:
    probe = (
        "import sys, hermes_runtime.agent.runner\n"
        f"print([m for m in {NOT_IN_ENTRYPOINT!r} if m in sys.modules])"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True
    ).stdout
    assert out.strip() == "[]", out
