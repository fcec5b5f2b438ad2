"""Progress for people, structured lines for machines.

Long operations (backup, restore, import) call ``reporter()``: on a terminal
it draws a rich progress bar; elsewhere (a CronJob, CI) it writes one JSON
object per line to stderr, which log collectors parse without rules.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TextIO

if TYPE_CHECKING:
    from rich.progress import Progress


def log_event(event: str, stream: TextIO | None = None, **fields: Any) -> None:
    """Write one structured log line: ``{"ts": ..., "event": ..., **fields}``."""
    out = stream if stream is not None else sys.stderr
    record = {"ts": round(time.time(), 3), "event": event, **fields}
    out.write(json.dumps(record, default=str, sort_keys=False) + "\n")
    out.flush()


@dataclass
class Reporter:
    """Reports steps of one long operation, the same calls on a tty or not."""

    operation: str
    interactive: bool
    stream: TextIO
    _progress: Progress | None = field(default=None, repr=False)
    _task: Any = field(default=None, repr=False)

    def step(self, message: str, **fields: Any) -> None:
        if self._progress is not None:
            self._progress.console.log(message)
        else:
            log_event(f"{self.operation}.{message}", self.stream, **fields)

    def relay(self, source: str, line: str) -> None:
        """A line another program printed (restic's retries), shown as it comes."""
        if self._progress is not None:
            self._progress.console.log(f"{source}: {line}", markup=False, highlight=False)
        else:
            log_event(f"{self.operation}.{source}", self.stream, message=line)

    def start_task(self, description: str, total: float | None) -> None:
        if self._progress is not None:
            self._task = self._progress.add_task(description, total=total)
        else:
            log_event(f"{self.operation}.start", self.stream, description=description, total=total)

    def advance(self, amount: float) -> None:
        if self._progress is not None and self._task is not None:
            self._progress.advance(self._task, amount)


@contextmanager
def reporter(operation: str, stream: TextIO | None = None) -> Iterator[Reporter]:
    out = stream if stream is not None else sys.stderr
    if out.isatty():  # rich only here: the long-lived processes that log never draw bars
        from rich.progress import (
            BarColumn,
            DownloadColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
        )

        progress = Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            DownloadColumn(),
            TimeElapsedColumn(),
            transient=True,
        )
        with progress:
            yield Reporter(operation, True, out, progress)
    else:
        yield Reporter(operation, False, out)
