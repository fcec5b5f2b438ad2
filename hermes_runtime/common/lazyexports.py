"""A package's public names, each loaded from its home module on first use (PEP 562).

Why: a package ``__init__`` that imports every module it re-exports makes importing any one
part pay for all of them. The agent's entrypoint lives for the pod's whole life and reads
only the status records of ``backup`` and ``vault``; importing their packages whole would keep
restic's wrappers, hvac and requests resident in it for nothing. So a package lists where each
name lives, re-exports them all under ``__all__``, and loads a home module when one of its
names is first asked for. The same names are imported under ``TYPE_CHECKING`` in the package,
so type checkers and the architecture test see every dependency
(``tests/unit/test_lazy_exports.py`` checks that both lists agree).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from importlib import import_module
from typing import Any


def lazy_exports(package: str, homes: Mapping[str, str]) -> Callable[[str], Any]:
    """The module ``__getattr__`` of ``package``: ``homes`` maps each public name to its
    module, relative to the package (``"status"`` for ``<package>.status``)."""

    def __getattr__(name: str) -> Any:
        home = homes.get(name)
        if home is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(import_module(f"{package}.{home}"), name)

    return __getattr__
