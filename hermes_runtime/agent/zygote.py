"""The warm gateway: a gateway process that imports its libraries while the pod waits for the lock.

Why: a pod that replaces another waits for the data dir lock (``datalock.py``) until the old
gateway has drained and exited; only then could a new ``hermes gateway run`` start, and Hermes
needs seconds to import before it binds its port. That import was most of the hand-over's
outage. So the entrypoint starts the gateway process at once, as this small launcher: it
imports the heavy libraries (``PRELOAD``), reports "warm" on a pipe, and blocks until the
entrypoint holds the lock and says "go"; then it runs the gateway command (``python -m
hermes_runtime.agent.gateway_main hermes_cli.main gateway run``, ``gateway.py``) in the same
process, where those imports are already done.

The rule that makes this safe: nothing may touch the data dir before the lock. Hermes' own
modules read ``config.yaml`` and ``.env`` and open log files in ``HERMES_HOME`` when imported,
so they are not preloaded; ``PRELOAD`` is the third-party libraries they use, which know
nothing of ``HERMES_HOME``; in order, so that when "go" comes first (no old gateway to wait
for) the preload stops and the gateway imports the rest when it needs them. An audit hook
guards it anyway: any file access under the data dir
(``HERMES_HOME``, which also holds ``$HOME``) before "go" is refused, and a refused access
taints the process, which then replaces itself with a fresh interpreter (``exec``, same PID,
same inherited lock) instead of running with half-imported modules. A test runs the real
Hermes' preload and checks that it stays clean.

Run as a script (``python -P zygote.py MODULE ARGS...``, standard library only) so that it
starts without importing ``hermes_runtime``; ``-P`` keeps this folder off ``sys.path`` (its
``gateway.py`` would shadow Hermes' ``gateway`` package). The parent's side is
``start_zygote`` / ``Zygote``.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import runpy
import select
import subprocess
import sys
import time
from collections.abc import Mapping, MutableMapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

FDS_ENV = "HERMES_RUNTIME_ZYGOTE_FDS"  # "<status write fd>,<go read fd>"
PRELOAD_ENV = "HERMES_RUNTIME_ZYGOTE_PRELOAD"  # comma-separated module names
GO = b"g"
# Audit events that name paths, and which of their arguments are paths.
_PATH_EVENTS = {
    "open": (0,),
    "os.chmod": (0,),
    "os.chown": (0,),
    "os.link": (0, 1),
    "os.listdir": (0,),
    "os.mkdir": (0,),
    "os.remove": (0,),
    "os.rename": (0, 1),
    "os.rmdir": (0,),
    "os.scandir": (0,),
    "os.symlink": (0, 1),
    "os.truncate": (0,),
    "os.utime": (0,),
    "shutil.copyfile": (0, 1),
    "shutil.rmtree": (0,),
    "sqlite3.connect": (0,),
}


class DataDirTouched(PermissionError):
    """Raised by the guard: something tried to touch the data dir before the lock was held."""


@dataclass
class _Guard:
    """The audit hook: refuses every path event under ``root`` until ``lift()``."""

    root: str
    active: bool = True
    touched: list[str] = field(default_factory=list)

    def __call__(self, event: str, args: tuple[Any, ...]) -> None:
        if not self.active or event not in _PATH_EVENTS:
            return
        for index in _PATH_EVENTS[event]:
            arg = args[index] if index < len(args) else None
            if isinstance(arg, (str, bytes, os.PathLike)) and self._inside(arg):
                self.touched.append(f"{event} {os.fsdecode(arg)}")
                raise DataDirTouched(f"{event} {os.fsdecode(arg)}: the data dir lock is not held")

    def _inside(self, arg: str | bytes | os.PathLike[Any]) -> bool:
        path = os.path.abspath(os.fsdecode(arg))
        return path == self.root or path.startswith(self.root + os.sep)

    def lift(self) -> None:
        self.active = False  # audit hooks cannot be removed; this one now returns at once


def _preload(modules: Sequence[str], guard: _Guard, go_fd: int) -> dict[str, Any]:
    """Import ``modules`` in order until done or until "go" arrives (the lock came first:
    the gateway imports the rest itself, when it needs them, so a long preload never delays
    a start). A module that fails to import is left to the real run."""
    started = time.monotonic()
    failed, done = [], 0
    for name in modules:
        if select.select([go_fd], [], [], 0)[0]:
            break
        try:
            importlib.import_module(name)
        except Exception as exc:  # any failure: the gateway imports it again, and says why
            failed.append(f"{name}: {type(exc).__name__}")
        done += 1
    return {
        "warm": True,
        "seconds": round(time.monotonic() - started, 3),
        "imported": done,
        "skipped": len(modules) - done,
        "failed": failed,
        "touched": guard.touched[:3],
    }


@dataclass(frozen=True)
class Handoff:
    """The launcher's settings, which the entrypoint passes in its environment (``start``):
    the two pipes, the modules to preload, and the data dir its guard keeps closed. The data
    dir is ``HERMES_HOME`` as given: the gateway's environment always names it
    (``gateway.gateway_env``, from the entrypoint's settings), and this script imports
    nothing of ``hermes_runtime`` to resolve it."""

    status_fd: int
    go_fd: int
    preload: list[str]
    data_dir: str

    @classmethod
    def take(cls, env: MutableMapping[str, str]) -> Handoff:
        """Read the launcher's variables from ``env`` and remove its own two: the gateway it
        becomes inherits ``env`` and must not see stale descriptors."""
        status_fd, go_fd = (int(fd) for fd in env.pop(FDS_ENV).split(","))
        preload = [m for m in env.pop(PRELOAD_ENV, "").split(",") if m]
        return cls(status_fd, go_fd, preload, os.path.abspath(env["HERMES_HOME"]))


def main(argv: Sequence[str]) -> None:
    """The child: preload, report, wait for "go", then run ``argv[0]`` as ``python -m``."""
    module, args = argv[0], list(argv[1:])
    handoff = Handoff.take(os.environ)
    status_fd, go_fd = handoff.status_fd, handoff.go_fd
    guard = _Guard(handoff.data_dir)
    sys.addaudithook(guard)
    report = _preload(handoff.preload, guard, go_fd)
    with contextlib.suppress(OSError):  # the entrypoint may have given up on us already
        os.write(status_fd, json.dumps(report).encode() + b"\n")
    os.close(status_fd)
    go = os.read(go_fd, 1)
    os.close(go_fd)
    if go != GO:
        sys.exit(0)  # the entrypoint went away or changed its mind: never run without the lock
    guard.lift()
    if guard.touched:  # some import is half done: start over in a clean interpreter
        os.execv(sys.executable, [sys.executable, "-m", module, *args])
    sys.argv = [module, *args]
    runpy.run_module(module, run_name="__main__", alter_sys=True)


# -- the entrypoint's side ---------------------------------------------------------------------


@dataclass
class Zygote:
    """A started launcher: ``warm()`` once it reported, ``go()`` to run it, else ``discard()``."""

    proc: subprocess.Popen[bytes]
    env: dict[str, str]
    status_fd: int
    go_fd: int
    report: dict[str, Any] | None = None
    taken: bool = False

    def warm(self) -> bool:
        """Whether the preload is done (non-blocking); a dead launcher counts as done."""
        if self.report is None and self.status_fd >= 0:
            readable, _, _ = select.select([self.status_fd], [], [], 0)
            if readable:
                line = os.read(self.status_fd, 65536)
                self.report = _parse_report(line)
        return self.report is not None or self.proc.poll() is not None

    def go(self) -> subprocess.Popen[bytes]:
        """Let it run the gateway (the caller holds the data dir lock).

        A launcher that died meanwhile is returned all the same: the supervisor sees its exit
        as a crash and starts a gateway the usual way."""
        with contextlib.suppress(BrokenPipeError):
            os.write(self.go_fd, GO)
        self.taken = True
        self._close()
        return self.proc

    def discard(self) -> None:
        """End an unused launcher: EOF on its "go" pipe makes it exit 0; kill if it lingers."""
        if self.taken:
            return
        self._close()
        try:
            self.proc.wait(5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()

    def _close(self) -> None:
        for name in ("status_fd", "go_fd"):
            fd = getattr(self, name)
            if fd >= 0:
                os.close(fd)
                setattr(self, name, -1)


def _parse_report(line: bytes) -> dict[str, Any]:
    try:
        report = json.loads(line)
    except ValueError:
        return {"warm": False, "error": line[:200].decode(errors="replace")}
    return report if isinstance(report, dict) else {"warm": False}


def start_zygote(
    command: Sequence[str],
    env: Mapping[str, str],
    preload: Sequence[str],
    *,
    cwd: Path | None = None,
    pass_fds: Sequence[int] = (),
) -> Zygote:
    """Start ``command`` (``python -m MODULE ARGS...``) as a launcher that preloads first.

    ``env`` must be the gateway's environment; ``Zygote.env`` keeps it so the caller can tell
    whether the environment changed before "go" (then it discards the launcher).
    """
    python, flag, module, *args = command
    if flag != "-m":
        raise ValueError(f"the warm gateway runs `python -m MODULE`, not {list(command)}")
    status_r, status_w = os.pipe()
    go_r, go_w = os.pipe()
    child_env = {**env, FDS_ENV: f"{status_w},{go_r}", PRELOAD_ENV: ",".join(preload)}
    try:
        proc = subprocess.Popen(
            [python, "-P", __file__, module, *args],
            env=child_env,
            cwd=cwd,
            start_new_session=True,  # as the supervisor starts every gateway
            pass_fds=(*pass_fds, status_w, go_r),
        )
    except BaseException:
        for fd in (status_r, go_w):
            os.close(fd)
        raise
    finally:
        os.close(status_w)
        os.close(go_r)
    return Zygote(proc, dict(env), status_r, go_w)


if __name__ == "__main__":
    main(sys.argv[1:])
