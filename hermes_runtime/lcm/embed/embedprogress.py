"""Progress of ``lcm embed`` on stderr: a bar with the rate on a terminal, JSON lines elsewhere.

Why not ``common.logs.reporter``: its bar counts bytes; this one counts
items and shows items/s and the time left, which is what an operator waits
on. Off a terminal (a Job, CI) one ``lcm.embed.progress`` object per line,
at most every ``LINE_EVERY_S`` seconds plus the first and the last, so a
100k-item job logs a few hundred lines, not one per batch.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TextIO

from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

from hermes_runtime.common.logs import log_event
from hermes_runtime.lcm.embed.embedjob import EmbedProgress

LINE_EVERY_S = 5.0
EVENT = "lcm.embed.progress"


@contextmanager
def progress_reporter(
    model: str, stream: TextIO | None = None
) -> Iterator[Callable[[EmbedProgress], None]]:
    """A callback for ``embed_database(on_progress=...)``, drawing on ``stream`` (stderr)."""
    out = stream if stream is not None else sys.stderr
    if out.isatty():
        with _bar(model, out) as report:
            yield report
        return
    unprinted: list[EmbedProgress] = []
    printed = [0.0]

    def line(progress: EmbedProgress) -> None:
        now = time.monotonic()
        if printed[0] == 0.0 or now - printed[0] >= LINE_EVERY_S:
            printed[0] = now
            unprinted.clear()
            log_event(EVENT, out, **progress.as_dict())
        else:
            unprinted[:] = [progress]

    yield line
    if unprinted:  # the last state, had it come too soon after the line before
        log_event(EVENT, out, **unprinted[0].as_dict())


@contextmanager
def _bar(model: str, out: TextIO) -> Iterator[Callable[[EmbedProgress], None]]:
    from rich.console import Console

    progress = Progress(
        TextColumn("[bold]embedding[/bold] {task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[rate]} items/s"),
        TimeRemainingColumn(),
        TimeElapsedColumn(),
        console=Console(file=out),
        transient=False,
    )
    with progress:
        task = progress.add_task(model, total=None, rate="-")

        def draw(state: EmbedProgress) -> None:
            progress.update(
                task,
                total=state.total,
                completed=state.done + state.already,
                rate=f"{state.items_per_s:.1f}",
            )

        yield draw
