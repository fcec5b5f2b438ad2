"""The virtual tables' own checks of database snapshots, run while restic stores them.

Why: since SQLite 3.44 ``integrity_check`` also runs each virtual table's check, and FTS5's
re-tokenises every row: 2.6 s of the 3.3 s check of a 1 GiB LCM database. ``create`` checks
every b-tree (FTS5's shadow tables included) before restic starts, and these checks on a
core of their own while restic reads and uploads on the other. A failure then removes the
snapshot restic saved (the caller's part). They need the snapshot's copy whole while the
pieces are cut from it, so they run beside the upload only when the scratch space has room
for both; otherwise the caller checks first, as before.
"""

from __future__ import annotations

import shutil
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType

from hermes_runtime.backup.dbsnap import check_virtual_tables

# Room left for restic's temporary pack files (16 MiB each, a few at once) and the manifest.
ROOM_MARGIN_BYTES = 128 << 20


@dataclass
class DeferredChecks:
    """Checks started by ``start``, each on the one worker thread, in order; ``failures`` waits."""

    pool: ThreadPoolExecutor = field(
        default_factory=lambda: ThreadPoolExecutor(1, thread_name_prefix="virtual-table-check")
    )
    running: dict[str, Future[str]] = field(default_factory=dict)

    def start(self, name: str, copy: Path) -> bool:
        """Check ``copy``'s virtual tables in the background; False when there is no room.

        There is room when the scratch space can hold the pieces beside the whole copy.
        """
        if shutil.disk_usage(copy.parent).free < copy.stat().st_size + ROOM_MARGIN_BYTES:
            return False
        self.running[name] = self.pool.submit(check_virtual_tables, copy)
        return True

    def discard_when_checked(self, name: str, copy: Path) -> None:
        """Delete ``copy`` once its check has ended (now, if it has): nothing else reads it."""
        self.running[name].add_done_callback(lambda _: copy.unlink(missing_ok=True))

    def failures(self) -> dict[str, str]:
        """What each failed check found, by name, once every check has ended."""
        found = {name: _outcome(future) for name, future in self.running.items()}
        return {name: problems for name, problems in found.items() if problems != "ok"}

    def __enter__(self) -> DeferredChecks:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self.pool.shutdown(wait=True, cancel_futures=True)


def _outcome(future: Future[str]) -> str:
    try:
        return future.result()
    except Exception as exc:  # a check that could not run has not passed
        return f"check failed: {type(exc).__name__}: {exc}"
