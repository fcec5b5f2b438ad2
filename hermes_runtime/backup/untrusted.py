"""Names read from a backup target, joined onto a folder only once shown to stay inside it.

Why: every name a restore writes under comes from the target, and whoever can write the
target chooses them: a restic snapshot's members and its manifest's keys (anyone holding the
repository password can back up a folder of their own making), and a Litestream replica's
keys (anyone who can write the bucket or the volume: replicas are plain files, not
authenticated). The agent's own shell may be such a writer. A name with a ``..`` or an
absolute part, or one that reaches through a symlink the snapshot itself restored, would
otherwise write outside the staging folder, into the data dir's parent or anywhere else.

One rule for every such join (``inside``): a relative path of plain parts (no ``..``, no
``.``, no empty part, no NUL), and, with every symlink on the way resolved, still inside the
folder. A name that breaks it fails the restore naming the name and where it came from.
"""

from __future__ import annotations

import os
from pathlib import Path

from hermes_runtime.common.errors import RuntimeFailure


class UnsafePath(RuntimeFailure):
    """A name from the target that would lead outside the folder it is joined onto."""


def name_problem(name: str) -> str | None:
    """Why ``name`` is not a relative path of plain parts, or None when it is one."""
    if not name:
        return "is empty"
    if "\0" in name:
        return "holds a NUL byte"
    if name.startswith("/"):
        return "is absolute"
    for part in name.split("/"):
        if part in ("", ".", ".."):
            shown = "an empty" if not part else f"a {part!r}"
            return f"has {shown} part"
    return None


def checked_name(name: str, source: str) -> str:
    """``name`` itself when it is a relative path of plain parts; else ``UnsafePath``.

    ``source`` says where the name came from (a snapshot id, a manifest, a replica key),
    for the message.
    """
    problem = name_problem(name)
    if problem is not None:
        raise UnsafePath(f"{source}: unsafe path {name!r}: it {problem}")
    return name


def inside(root: Path, name: str, source: str) -> Path:
    """``root / name``, once ``name`` is plain and resolves (symlinks followed) inside ``root``.

    The check is made when the caller is about to write: whatever exists under ``root`` then
    (a symlink a snapshot restored, say) is taken into account. A symlink as the last part
    counts too: nothing of ours writes through one, but one pointing out is no database.
    """
    path = root / checked_name(name, source)
    real_root = os.path.realpath(root)
    real = os.path.realpath(path)
    if not real.startswith(real_root.rstrip("/") + "/"):
        raise UnsafePath(
            f"{source}: unsafe path {name!r}: it leads to {real}, outside {root} "
            "(through a symlink)"
        )
    return path
