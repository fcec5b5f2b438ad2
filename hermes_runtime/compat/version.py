"""Which Hermes is installed, which versions an adapter knows, and how an adapter says no.

Every adapter in this package touches one Hermes internal (a private module global, a
marker file's contract, the context-engine ABC). Hermes changes those without notice, so
each adapter checks two things before it relies on one: the installed ``hermes-agent``
distribution's version is one the adapter was checked against (``Accepts``), and the
internal still has the shape the adapter uses. Then it either refuses (``refuse``: a
``HermesIncompatible`` naming the version, the internal and what is wrong) or, where
running without it is safe, degrades (``degrade``: one ``hermes.compat.degraded`` log line
that says what is lost).

Only importlib.metadata is read here: importing this module imports nothing of Hermes.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, NoReturn

from hermes_runtime.common.errors import RuntimeFailure
from hermes_runtime.common.logs import log_event

DISTRIBUTION = "hermes-agent"
# What the test suite installs and runs (pyproject's `hermes` extra, the image's lock).
TESTED_VERSION = "0.19.0"
VERSION_PATTERN = re.compile(r"^(\d+)\.(\d+)(?:\.(\d+))?")


def parse_version(text: str) -> tuple[int, int, int] | None:
    """``(major, minor, patch)`` of a release string (a suffix such as ``rc1`` is ignored)."""
    found = VERSION_PATTERN.match(text.strip())
    if found is None:
        return None
    major, minor, patch = found.groups()
    return int(major), int(minor), int(patch or 0)


@dataclass(frozen=True)
class Accepts:
    """The Hermes releases an adapter was checked against: ``first`` <= version < ``below``."""

    first: str
    below: str

    def __contains__(self, version: object) -> bool:
        parts = parse_version(version) if isinstance(version, str) else None
        low, high = parse_version(self.first), parse_version(self.below)
        return parts is not None and low is not None and high is not None and low <= parts < high

    def __str__(self) -> str:
        return f">={self.first},<{self.below}"


# 0.19.0 is installed and tested; 0.20-0.23 were read, not run (they need Python >= 3.14 from
# v0.21, which no registry here serves): each adapter's shape check decides on those.
ACCEPTS = Accepts("0.19.0", "0.24")


def installed_version() -> str | None:
    """The installed ``hermes-agent`` distribution's version, or None when there is none.

    importlib.metadata is imported here, not with the module: the gateway process imports
    this package on its start, before Hermes (which loads it anyway)."""
    import importlib.metadata

    try:
        return importlib.metadata.version(DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:
        return None


def version_problem(version: str | None, accepts: Accepts = ACCEPTS) -> str | None:
    """Why ``version`` is not one ``accepts`` covers (None: it is)."""
    if version is None:
        return f"no {DISTRIBUTION} distribution is installed, so its version is unknown"
    if version not in accepts:
        return (
            f"hermes-runtime knows Hermes {accepts} for this (tested: {TESTED_VERSION}); "
            "pin a known Hermes (the image's HERMES_AGENT_SPEC build argument) or use a "
            "hermes-runtime release that knows this one"
        )
    return None


class HermesIncompatible(RuntimeFailure):
    """The installed Hermes lacks an internal hermes-runtime relies on, in the shape it uses."""


@dataclass(frozen=True)
class Verdict:
    """One adapter's check: the internal, the Hermes version, and what is wrong (None: fine)."""

    internal: str
    version: str | None
    problem: str | None

    @property
    def ok(self) -> bool:
        return self.problem is None

    def describe(self) -> str:
        return f"Hermes {self.version or '(unknown version)'}: {self.internal}: {self.problem}"

    def log(self, event: str, level: str, **extra: Any) -> None:
        """The verdict as one log line: what was checked, on which Hermes, what is wrong."""
        log_event(
            event,
            level=level,
            internal=self.internal,
            hermes_version=self.version,
            problem=self.problem,
            **extra,
        )


def verdict(
    internal: str, version: str | None, shape_problem: str | None, accepts: Accepts = ACCEPTS
) -> Verdict:
    """The version is checked first: a shape that happens to match on an unknown release
    proves nothing about what the internal now means."""
    return Verdict(internal, version, version_problem(version, accepts) or shape_problem)


def refuse(found: Verdict) -> NoReturn:
    """Stop: running on without this internal would be wrong, not just weaker.

    Logged too: the host may report a plugin's exception in a shape of its own.
    """
    found.log("hermes.compat.refused", "error")
    raise HermesIncompatible(found.describe())


def degrade(found: Verdict, fallback: str) -> None:
    """Carry on without the internal, saying so once, with what that costs (``fallback``)."""
    found.log("hermes.compat.degraded", "warning", fallback=fallback)
