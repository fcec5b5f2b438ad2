"""The interface every kind of replica target answers (``Replicas``), and what they share.

Why a protocol: replication (the Litestream config), restore (which copy is newer) and the
messages of both need the same few things of a target, whatever holds the files; each kind
answers them in its own module, chosen once (``target.py``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

REPLICA_PREFIX = "litestream"  # the folder of the target every agent's replicas live under


class Replicas(Protocol):
    """One agent's Litestream replicas on one target.

    ``url``: the URL the operator gave (the target, or ``<target>/litestream``), for messages.
    ``env``: the environment Litestream runs with, and the source of the target's keys.
    Keys (``ltx_keys``, ``read_header``) are relative to ``replicas_root()``.
    """

    url: str
    agent: str
    env: Mapping[str, str]

    def replicas_root(self) -> str:
        """The folder or key prefix, with a trailing slash, the agent's replicas live under."""
        ...

    def replicas_url(self) -> str:
        """Every agent's replicas, ``<target>/litestream``: the URL ``--replicas`` takes."""
        ...

    def replica_url(self, relpath: str) -> str:
        """A URL ``litestream restore`` and ``litestream ltx`` take (no secret in it)."""
        ...

    def replica_config(self, relpath: str) -> dict[str, Any]:
        """The ``replica:`` block of one database in Litestream's config file."""
        ...

    def check_reachable(self) -> None:
        """Fail naming the target when replication could not write to it at all."""
        ...

    def ltx_keys(self) -> list[str]:
        """Every file's key below ``replicas_root()`` (the caller picks the LTX files)."""
        ...

    def read_header(self, key: str, size: int) -> bytes:
        """Up to ``size`` first bytes of the file ``key``; fewer only when the file is shorter."""
        ...

    def agent_url(self) -> str:
        """The URL of this agent's replicas, for messages."""
        return f"{self.replicas_url()}/{self.agent}"

    def replica_path(self, relpath: str) -> str:
        """The folder or key prefix of one database's replica."""
        return self.replicas_root() + relpath


def safe_url(url: str) -> str:
    """A replica URL for messages: no query string (it holds only endpoint and region anyway)."""
    return url.split("?", 1)[0]
