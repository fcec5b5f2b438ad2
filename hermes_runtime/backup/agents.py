"""Whose backups these are: every verb acts on one agent's snapshots and replicas only.

A fleet shares one target: one bucket, one prefix and often one restic password for every
release (the chart's defaults, the production example). One restic repository then holds
many agents' snapshots, and one replicas folder many agents' databases. So each snapshot
carries its agent's name as restic's host (``--host``: restic groups and filters by it),
``prune`` forgets among that agent's snapshots only, ``restore``/``verify`` resolve
``latest`` among them and refuse another agent's snapshot by id unless that agent is named,
and each agent's Litestream replicas live in a folder of their own.

The name comes from outside the data dir (the chart passes ``<namespace>.<release>``):
the data dir is the agent's to change, and a name read from it would let a hostile agent
choose whose snapshots its backup pod prunes. A name is one path segment, so no agent's
replica folder can lie inside another's. ``LEGACY`` is the host every snapshot had before
agents were named; it is the name used when none is given, so a lone agent keeps its
snapshots across the upgrade.
"""

from __future__ import annotations

import re

from hermes_runtime.common.errors import RuntimeFailure

LEGACY = "hermes-runtime"
ENV = "HERMES_RUNTIME_AGENT"
MAX_LENGTH = 128
_NAME = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?")


def agent_problem(name: str) -> str | None:
    """Why ``name`` cannot name an agent, or None when it can."""
    if len(name) > MAX_LENGTH:
        return f"{len(name)} characters, at most {MAX_LENGTH}"
    if not _NAME.fullmatch(name) or ".." in name:
        return (
            "letters, digits, '.', '_' and '-', starting and ending with a letter or digit "
            "(one path segment: the chart uses <namespace>.<release>)"
        )
    return None


def checked_agent(name: str, source: str = "--agent") -> str:
    """``name`` when it can name an agent; else a failure naming ``source`` and the rule."""
    problem = agent_problem(name)
    if problem is not None:
        raise RuntimeFailure(f"{source} {name!r}: {problem}")
    return name
