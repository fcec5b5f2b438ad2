"""What a process gives back when it goes idle: the C heap's free pages, and the page cache
of model files no process maps any more.

Why a module of its own: a process that dropped a large structure (an embedding engine, a
turn's buffers) keeps most of the freed memory in glibc's arenas, so its resident memory
hardly falls; ``malloc_trim`` returns it. And the files a model was read from stay in the
page cache, charged to the container's memory (its working set) until the kernel needs the
room: an idle agent drops them once the process that read them has exited. Called where a
process goes idle, never per call.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
from collections.abc import Iterable
from pathlib import Path


def return_freed_memory() -> bool:
    """Hand the C heap's free pages back to the kernel (glibc's ``malloc_trim``).

    False where there is no glibc (the memory then stays with the process, as before).
    """
    try:
        return bool(ctypes.CDLL("libc.so.6").malloc_trim(0))
    except (OSError, AttributeError):
        return False


def drop_from_page_cache(paths: Iterable[Path]) -> int:
    """Advise the kernel that the files' cached pages are not needed (``POSIX_FADV_DONTNEED``):
    pages no process maps leave the page cache. How many files were advised; a file that is
    missing or unreadable is skipped (the pages are reclaimable anyway)."""
    advised = 0
    for path in paths:
        with contextlib.suppress(OSError):
            fd = os.open(path, os.O_RDONLY)
            try:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
                advised += 1
            finally:
                os.close(fd)
    return advised
