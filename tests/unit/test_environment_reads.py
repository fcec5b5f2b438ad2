"""Each process reads its environment in one settings model, never here and there.

A variable read in passing (``os.environ.get("X")`` deep in a module) has no default written
beside its rule, is missed by whoever documents the settings, and can disagree with the same
variable read elsewhere. So outside the settings modules ``hermes_runtime`` only hands the
environment on whole: to a settings model (``AgentSettings.from_environ(os.environ)``) or to a
child process (``dict(os.environ)``). Checked from the source with ``ast``; a read is
``os.getenv(...)``, ``os.environ[...]``, ``os.environ.get(...)`` (or any other method but
``copy``), ``... in os.environ``, and ``environ``/``getenv`` imported from ``os``.

``PENDING`` names the modules outside the settings that still read a variable, each with
what it reads, and a test fails when one of them no longer does, so the list only shrinks.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "hermes_runtime"
NOT_SCANNED: tuple[str, ...] = ()
SETTINGS_MODULES = {
    # The CLI's variables, and the one an operator names on its command line.
    "cli/settings.py",
}
PENDING: set[str] = set()
WHOLE = {"copy"}  # methods that hand the environment on whole


def _is_environ(node: ast.AST) -> bool:
    return (
        isinstance(node, ast.Attribute)
        and node.attr in ("environ", "environb")
        and isinstance(node.value, ast.Name)
        and node.value.id == "os"
    )


def reads(tree: ast.AST) -> Iterator[int]:
    """The line of every read of the environment in ``tree`` (see the module's rule)."""
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module == "os":
            if any(alias.name in ("environ", "environb", "getenv") for alias in node.names):
                yield node.lineno
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            func = node.func
            if isinstance(func.value, ast.Name) and func.value.id == "os":
                if func.attr in ("getenv", "getenvb"):
                    yield node.lineno
            elif _is_environ(func.value) and func.attr not in WHOLE:
                yield node.lineno
        elif isinstance(node, ast.Subscript) and _is_environ(node.value):
            if isinstance(node.ctx, ast.Load):
                yield node.lineno
        elif isinstance(node, ast.Compare) and any(_is_environ(c) for c in node.comparators):
            yield node.lineno


def readers(root: Path) -> dict[str, list[int]]:
    """Module (relative to ``root``) -> the lines where it reads the environment."""
    found: dict[str, list[int]] = {}
    for path in sorted(root.rglob("*.py")):
        relative = path.relative_to(root).as_posix()
        if relative.split("/", 1)[0] in NOT_SCANNED:
            continue
        lines = sorted(set(reads(ast.parse(path.read_text(), str(path)))))
        if lines:
            found[relative] = lines
    return found


def test_only_settings_modules_read_the_environment() -> None:
    stray = {
        module: lines
        for module, lines in readers(PACKAGE).items()
        if module not in SETTINGS_MODULES | PENDING
    }
    assert stray == {}, (
        "read the variable in the process's settings model (agent/settings.py, "
        f"cli/settings.py) and pass the value: {stray}"
    )


def test_every_pending_reader_still_reads() -> None:
    """A module that no longer reads a variable leaves ``PENDING``: the list only shrinks."""
    assert set(readers(PACKAGE)) >= PENDING


def test_each_kind_of_read_is_found_and_handing_on_is_not(tmp_path: Path) -> None:
    reading = [
        'os.getenv("A")',
        'os.environ.get("A")',
        'os.environ["A"]',
        'os.environ.pop("A")',
        '"A" in os.environ',
        "from os import environ",
    ]
    handing_on = [
        "env = dict(os.environ)",
        "child = os.environ.copy()",
        "settings = Settings.from_environ(os.environ)",
        'os.environ["A"] = "1"',
        "env = os.environ if given is None else given",
    ]
    for number, line in enumerate(reading + handing_on):
        (tmp_path / f"m{number}.py").write_text(f"import os\n{line}\n")
    found = readers(tmp_path)
    assert set(found) == {f"m{number}.py" for number in range(len(reading))}
    assert all(lines == [2] for lines in found.values())
