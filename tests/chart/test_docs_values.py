"""Every chart value the documentation names exists in values.yaml.

A doc that names a value the chart does not have sends a reader to write a key the schema
refuses, or (in an open map) one the chart ignores. So every value path the prose names is
looked up: in docs/*.md and the chart README's prose, a backticked dotted path whose first
segment is a top-level key of values.yaml (`backup.interval`, `plugins[].submodules`) and the
keys of `--set` arguments; in values-examples/*.yaml, the same paths written bare in comments.

What such a path may be instead of a value, each told apart by a rule rather than a list:
- a key of the config.yaml the chart generates (`plugins.enabled`), or a Hermes config key or
  a log event written in snake_case (`lcm.db_path`): chart values are camelCase;
- a file name (`lcm.db`, `plugins.yaml`), a call (`backup.step(-1)`) or an address
  (`vault.example:8200`);
- an event the runtime logs (`vault.rendered`, `backup.create.started`) or a family of them
  (`plugins.watch`), found in the runtime's own string literals and f-string prefixes;
- a removed value the docs warn about, which the chart itself refuses naming it
  (`gitSync.sizeLimit`), checked by rendering it with the real helm.
`X[].field` is a list item's field, looked up in the schema's `items` of `X`.
"""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import yaml
from chart_testlib import CHART, EXAMPLES, REPO, render, template

RUNTIME = REPO / "hermes_runtime"
README = CHART / "README.md"
TABLE = re.compile(r"<!-- values-table:start.*?<!-- values-table:end -->", re.S)
SEGMENT = r"[A-Za-z][A-Za-z0-9_-]*(?:\[\])?"
PATH = rf"{SEGMENT}(?:\.{SEGMENT})+"
# After a path: the end of the name, not a file's extension, a call, an address or a URL path.
END = r"(?![\w(/@-]|\.\w|:[^\s`])"
BACKTICKED = re.compile(rf"`({PATH}){END}")
BARE = re.compile(rf"(?<![\w./:@$<{{-])({PATH}){END}")
SET_ARG = re.compile(r"--set(?:-string)?[ =]['\"]?([^\s'\"]+)")
FILE_EXTENSIONS = {"db", "yaml", "yml", "json", "py", "md", "txt", "tpl", "sh", "hcl", "pem"}
# Fields of Hermes' chat completion response (docs/lcm.md), not values.
RESPONSE_FIELDS = {"hermes.failed", "hermes.partial"}
REMOVED_WORDS = ("removed", "moved to", "replaced by")


@dataclass(frozen=True)
class Named:
    """A value path as a document names it, and where."""

    path: str
    where: str


@cache
def _values() -> dict[str, Any]:
    loaded = yaml.safe_load((CHART / "values.yaml").read_text(encoding="utf-8"))
    assert isinstance(loaded, dict)
    return loaded


@cache
def _schema() -> dict[str, Any]:
    loaded = json.loads((CHART / "values.schema.json").read_text(encoding="utf-8"))
    assert isinstance(loaded, dict)
    return loaded


def _prose(path: Path) -> str:
    """A document's text; the README without its generated values table (values.yaml's own)."""
    text = path.read_text(encoding="utf-8")
    return TABLE.sub("", text) if path == README else text


def _comments(path: Path) -> str:
    """The comments of a YAML file, one per line, in place (the keys are the schema's to check)."""
    return "\n".join(
        line.split("#", 1)[1] if "#" in line else "" for line in path.read_text().splitlines()
    )


def named_paths(text: str, where: str, *, bare: bool) -> Iterator[Named]:
    """Dotted names starting with a top-level value, and the keys of `--set` arguments."""
    tops = set(_values())
    pattern = BARE if bare else BACKTICKED
    for number, line in enumerate(text.splitlines(), start=1):
        found = [m.group(1) for m in pattern.finditer(line)]
        for argument in SET_ARG.findall(line):
            found += [item.split("=", 1)[0] for item in argument.split(",") if "=" in item]
        for path in found:
            if path.split(".", 1)[0].removesuffix("[]") in tops:
                yield Named(path, f"{where}:{number}")


def documented_paths() -> list[Named]:
    named: list[Named] = []
    for doc in [*sorted((REPO / "docs").glob("*.md")), README]:
        named += named_paths(_prose(doc), str(doc.relative_to(REPO)), bare=False)
    for example in sorted(EXAMPLES.glob("*.yaml")):
        named += named_paths(_comments(example), str(example.relative_to(REPO)), bare=True)
    return named


def _in_values(node: Any, segments: list[str]) -> bool:
    for segment in segments:
        if not isinstance(node, dict) or segment not in node:
            return False
        node = node[segment]
    return True


def _schema_node(node: dict[str, Any]) -> dict[str, Any]:
    while "$ref" in node:
        node = _schema()["$defs"][node["$ref"].rsplit("/", 1)[1]]
    return node


def _in_schema(segments: list[str]) -> bool:
    """The path through the schema's `properties`, `[]` through `items` (a list item's field)."""
    node = _schema_node(_schema())
    for segment in segments:
        name, is_list = segment.removesuffix("[]"), segment.endswith("[]")
        node = _schema_node(node.get("properties", {}).get(name, {}))
        if not node:
            return False
        if is_list:
            node = _schema_node(node.get("items", {}))
            if not node:
                return False
    return True


def value_exists(path: str) -> bool:
    """In values.yaml; a path through a list (`plugins[].submodules`) in the schema's items."""
    segments = path.split(".")
    if "[]" in path:
        return _in_schema(segments)
    return _in_values(_values(), segments)


def _text(node: ast.expr | None) -> str:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else ""


def _event_prefix(node: ast.AST) -> str:
    """The fixed start of an event name the runtime builds, or "".

    A dotted f-string's head (`f"vault.token.{action}"`), and a progress reporter's operation
    (`reporter("backup.create", ...)` logs `backup.create.<step>`).
    """
    if isinstance(node, ast.Call) and getattr(node.func, "id", "") == "reporter" and node.args:
        head = _text(node.args[0])
        return f"{head}." if head else ""
    if isinstance(node, ast.JoinedStr) and node.values:
        head = _text(node.values[0])
        return head if head.count(".") >= 2 and head.endswith(".") else ""
    return ""


def _runtime_names() -> tuple[set[str], tuple[str, ...]]:
    """The runtime's dotted string literals (its log events), and its events' prefixes."""
    literals: set[str] = set()
    prefixes: list[str] = []
    dotted = re.compile(rf"^{PATH}$")
    for source in RUNTIME.rglob("*.py"):
        for node in ast.walk(ast.parse(source.read_text(encoding="utf-8"))):
            text = _text(node) if isinstance(node, ast.Constant) else ""
            if dotted.match(text):
                literals.add(text)
            if prefix := _event_prefix(node):
                prefixes.append(prefix)
    return literals, tuple(prefixes)


def _config_paths(node: Any, prefix: str = "") -> Iterator[str]:
    if isinstance(node, dict):
        for key, value in node.items():
            yield f"{prefix}{key}"
            yield from _config_paths(value, f"{prefix}{key}.")


@cache
def _not_values() -> tuple[set[str], tuple[str, ...]]:
    """Names that look like value paths and are something else (the module docstring's rules)."""
    literals, prefixes = _runtime_names()
    seed = yaml.safe_load(render().configmap_file("config.yaml"))
    return literals | set(_config_paths(seed)) | RESPONSE_FIELDS, prefixes


def is_value_path(path: str) -> bool:
    names, prefixes = _not_values()
    if path in names or path.startswith(prefixes):
        return False
    family = f"{path}."  # a family of events, as in "`plugins.watch` lines"
    if any(name.startswith(family) for name in (*names, *prefixes)):
        return False
    if path.rsplit(".", 1)[1] in FILE_EXTENSIONS:
        return False
    return not any("_" in segment for segment in path.split("."))


@cache
def _templates_text() -> str:
    return "\n".join(
        f.read_text(encoding="utf-8")
        for f in sorted((CHART / "templates").rglob("*"))
        if f.is_file()
    )


def refused_as_removed(path: str) -> bool:
    """The chart refuses the path, naming it as removed or moved (a warning in the docs).

    Only a path the templates name can be refused so; the others are not rendered for.
    """
    if f"{path}:" not in _templates_text():
        return False
    overrides: dict[str, Any] = {}
    node = overrides
    *parents, leaf = path.split(".")
    for parent in parents:
        node = node.setdefault(parent, {})
    node[leaf] = "x"
    result = template(overrides)
    lines = [line for line in result.stderr.splitlines() if f"{path}:" in line]
    return result.returncode != 0 and any(w in line for line in lines for w in REMOVED_WORDS)


def unknown(named: Iterable[Named]) -> list[Named]:
    """The named paths that are values by the rules above and that the chart does not have."""
    candidates = [n for n in named if is_value_path(n.path) and not value_exists(n.path)]
    return [n for n in candidates if not refused_as_removed(n.path)]


def test_every_value_the_docs_name_exists() -> None:
    named = documented_paths()
    assert len({n.path for n in named}) > 100, "the pattern no longer finds the docs' values"
    missing = unknown(named)
    assert not missing, "values the docs name that values.yaml does not have:\n" + "\n".join(
        f"  {n.where}: {n.path}" for n in missing
    )


@pytest.mark.parametrize(
    ("line", "bare"),
    [
        ("Set `backup.intervall` to the schedule's period.", False),
        ("Each plugin's `plugins[].submodulez: true`.", False),
        ("helm install h charts/hermes-agent --set llm.baseUrl=http://x,llm.modle=m", False),
        ("# the addresses in networkPolicy.kubeApi.cidr (kubectl get endpoints ...)", True),
        ("Its tree is `gitSync.sizeLimitt` no more.", False),
    ],
)
def test_a_made_up_path_is_found(line: str, bare: bool) -> None:
    named = list(named_paths(line, "made-up.md", bare=bare))
    assert len(unknown(named)) == 1, named


@pytest.mark.parametrize(
    "line",
    [
        "`backup.interval`, `plugins[].submodules`, `vault.secrets[].for`",
        "`global.defaultStorageClass`, `networkPolicy.ingress.api: clients`",
        "`gitSync.sizeLimit` is gone; the chart refuses it",
        "`lcm.db`, `plugins.enabled` in config.yaml, `lcm.db_path`, `vault.rendered` is logged",
        "`vault.token.renewed`, `backup.step(-1)`, `vault.example:8200`, `plugins.watch` lines",
    ],
)
def test_what_is_not_a_made_up_path_passes(line: str) -> None:
    assert not unknown(named_paths(line, "real.md", bare=False))
