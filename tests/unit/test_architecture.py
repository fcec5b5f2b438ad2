"""The shape of ``hermes_runtime``: no import cycle, no oversized module, class or folder.

A module is read whole by whoever must change it, and a cycle makes two modules one unit
that can be understood, tested and moved only together. So the limits hold for every
module of the package, checked from its source with ``ast`` (nothing is imported):

- no import cycle, counting every import a module makes (``TYPE_CHECKING`` blocks and
  imports inside functions too: a lazy import hides a cycle, it does not remove it);
- no module over ``MAX_MODULE_LINES`` lines;
- no class with more than ``MAX_CLASS_METHODS`` methods of its own;
- no folder with more than ``MAX_FOLDER_MODULES`` modules besides its ``__init__.py``.

An import names the module it loads: ``from a.b import c`` depends on ``a.b.c`` when that
is a module, else on the package ``a.b`` (its ``__init__.py``).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

PACKAGE = "hermes_runtime"
ROOT = Path(__file__).resolve().parents[2] / PACKAGE
MAX_MODULE_LINES = 500
MAX_CLASS_METHODS = 25
MAX_FOLDER_MODULES = 25


def module_name(path: Path, root: Path) -> str:
    """Dotted name of a source file under ``root`` (whose own name is the package's)."""
    parts = [root.name, *path.relative_to(root).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules(root: Path) -> dict[str, Path]:
    """Every module of the package under ``root``: dotted name -> file."""
    return {module_name(path, root): path for path in sorted(root.rglob("*.py"))}


def imported(node: ast.Import | ast.ImportFrom, name: str, path: Path) -> Iterator[str]:
    """The dotted names one import statement of module ``name`` (file ``path``) loads."""
    if isinstance(node, ast.Import):
        yield from (alias.name for alias in node.names)
        return
    if node.level:  # relative: counted from the importing module's package
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1])
        target = f"{base}.{node.module}" if node.module else base
    else:
        target = node.module or ""
    yield target
    yield from (f"{target}.{alias.name}" for alias in node.names)


def import_graph(known: dict[str, Path]) -> dict[str, set[str]]:
    """Module -> the modules of the package it imports (see the module docstring)."""
    graph: dict[str, set[str]] = {}
    for name, path in known.items():
        edges: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if not isinstance(node, ast.Import | ast.ImportFrom):
                continue
            targets = [t for t in imported(node, name, path) if t in known]
            submodules = [t for t in targets[1:] if t != name] if targets else []
            if isinstance(node, ast.ImportFrom) and submodules:
                edges.update(submodules)
                if len(submodules) < len(node.names) and targets[0] in known:
                    edges.add(targets[0])  # names of the package itself, beside submodules
            else:
                edges.update(targets)
        edges.discard(name)
        graph[name] = edges
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One cycle (as a path back to its start) for every strongly connected component."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:  # Tarjan's algorithm
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph[node]):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component: set[str] = set()
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.add(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(cycle_in(graph, component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def cycle_in(graph: dict[str, set[str]], component: set[str]) -> list[str]:
    """A shortest path from the component's first module back to itself, inside it."""
    start = min(component)
    paths = {start: [start]}
    frontier = [start]
    while frontier:
        following: list[str] = []
        for node in frontier:
            for nxt in sorted(graph[node] & component):
                if nxt == start:
                    return [*paths[node], start]
                if nxt not in paths:
                    paths[nxt] = [*paths[node], nxt]
                    following.append(nxt)
        frontier = following
    raise AssertionError(f"no cycle through {start} in {sorted(component)}")


def test_the_import_graph_has_no_cycle() -> None:
    found = cycles(import_graph(modules(ROOT)))
    assert not found, "import cycles:\n" + "\n".join(" -> ".join(c) for c in found)


def test_no_module_is_over_the_line_limit() -> None:
    long = {
        f"{path.relative_to(ROOT.parent)}: {lines} lines"
        for path in modules(ROOT).values()
        if (lines := len(path.read_text().splitlines())) > MAX_MODULE_LINES
    }
    assert not long, f"modules over {MAX_MODULE_LINES} lines: {sorted(long)}"


def test_no_class_has_too_many_methods() -> None:
    large = []
    for path in modules(ROOT).values():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ClassDef):
                methods = [
                    n for n in node.body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)
                ]
                if len(methods) > MAX_CLASS_METHODS:
                    where = f"{path.relative_to(ROOT.parent)}:{node.lineno}"
                    large.append(f"{where} {node.name}: {len(methods)} methods")
    assert not large, f"classes over {MAX_CLASS_METHODS} methods: {large}"


def test_no_folder_holds_too_many_modules() -> None:
    crowded = {
        f"{folder.relative_to(ROOT.parent)}: {count} modules"
        for folder in [ROOT, *(p for p in ROOT.rglob("*") if p.is_dir())]
        if (count := sum(1 for f in folder.glob("*.py") if f.name != "__init__.py"))
        > MAX_FOLDER_MODULES
    }
    assert not crowded, f"folders over {MAX_FOLDER_MODULES} modules: {sorted(crowded)}"


def test_a_cycle_is_found_and_named(tmp_path: Path) -> None:
    """The checks themselves can fail: a package with a cycle through a lazy import."""
    package = tmp_path / PACKAGE
    (package / "sub").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "sub" / "__init__.py").write_text("")
    (package / "sub" / "a.py").write_text(f"from {PACKAGE}.sub import b\n")
    (package / "sub" / "b.py").write_text(
        f"def f():\n    from {PACKAGE}.sub.c import g\n    return g\n"
    )
    (package / "sub" / "c.py").write_text(
        f"from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from {PACKAGE}.sub.a import x\n"
    )
    (package / "sub" / "d.py").write_text("from . import c\n")
    graph = import_graph(modules(package))
    assert graph[f"{PACKAGE}.sub.d"] == {f"{PACKAGE}.sub.c"}
    sub = f"{PACKAGE}.sub"
    assert cycles(graph) == [[f"{sub}.a", f"{sub}.b", f"{sub}.c", f"{sub}.a"]]
