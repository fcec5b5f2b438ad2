"""Replicas in a folder (``file:///path``): a mounted volume the backup pods share."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from hermes_runtime.backup.replicas.base import REPLICA_PREFIX, Replicas
from hermes_runtime.common.errors import RuntimeFailure


@dataclass(frozen=True)
class FileReplicas(Replicas):
    """One agent's replicas under ``<root>/litestream/<agent>/``."""

    url: str
    root: str  # the target's folder
    agent: str
    env: Mapping[str, str] = field(default_factory=dict, repr=False)

    def replicas_root(self) -> str:
        return str(PurePosixPath(self.root) / REPLICA_PREFIX / self.agent) + "/"

    def replicas_url(self) -> str:
        return f"file://{PurePosixPath(self.root) / REPLICA_PREFIX}"

    def replica_url(self, relpath: str) -> str:
        return f"file://{self.replica_path(relpath)}"

    def replica_config(self, relpath: str) -> dict[str, Any]:
        return {"type": "file", "path": self.replica_path(relpath)}

    def check_reachable(self) -> None:
        """The target's folder must exist: a missing one is an unmounted volume, and
        Litestream would fill the container's own disk instead."""
        if not Path(self.root).is_dir():
            raise RuntimeFailure(
                f"--target {self.url}: {self.root} is not a folder (is the backup volume mounted?)"
            )

    def ltx_keys(self) -> list[str]:
        root = Path(self.replicas_root())
        if not root.is_dir():
            return []
        return [p.relative_to(root).as_posix() for p in root.rglob("*.ltx") if p.is_file()]

    def read_header(self, key: str, size: int) -> bytes:
        path = Path(self.replicas_root()) / key
        try:
            with path.open("rb") as fh:
                return fh.read(size)
        except OSError as exc:
            raise RuntimeFailure(f"litestream replica file {path}: {exc.strerror}") from exc
