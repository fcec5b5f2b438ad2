"""The C heap's free pages handed back to the kernel, when a process has just let go of much.

Why a module of its own: a process that dropped a large structure (an embedding engine, a
turn's buffers) keeps most of the freed memory in glibc's arenas, so its resident memory
hardly falls; ``malloc_trim`` returns it. Called where a process goes idle, never per call.
"""

from __future__ import annotations

import ctypes


def return_freed_memory() -> bool:
    """Hand the C heap's free pages back to the kernel (glibc's ``malloc_trim``).

    False where there is no glibc (the memory then stays with the process, as before).
    """
    try:
        return bool(ctypes.CDLL("libc.so.6").malloc_trim(0))
    except (OSError, AttributeError):
        return False
