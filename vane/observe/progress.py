"""Progress of the UDF stages on stderr, drawn with rich: per step the rows in and out, rows/s,
actors busy, and a bar with a percentage only when the stage knows its input's size (never a
guessed total). Shown only when stderr is a terminal and ``vane.configure(progress=...)``
allows it; rich is imported when the first stage starts, not at ``import vane``. While the
lines are drawn, what reaches fd 2 below Python is printed above them (``foreign_output.py``).
They end with their stages, or with the action (``close``) when a stage failed."""

from __future__ import annotations

import sys
import threading
import time
from typing import Any, TextIO

from vane.observe.events import (
    BatchDone,
    StageFinished,
    StageStarted,
    add_counts,
    describe_usage,
)
from vane.observe.foreign_output import ForeignOutput


class ProgressDisplay:
    """An event subscriber that draws one line per running stage."""

    def __init__(self, stream: TextIO | None = None) -> None:
        self.stream = stream or sys.stderr
        self._progress: Any = None
        # By step_id: two steps of one function are two lines.
        self._tasks: dict[int, Any] = {}
        self._rows: dict[int, list[int]] = {}
        self._usage: dict[int, dict[str, int]] = {}
        self._started: dict[int, float] = {}
        # fd 2's other writers, shown above the lines while they are drawn on the terminal.
        self._foreign: ForeignOutput | None = None
        self._lock = threading.Lock()  # events, and the action's end (``close``)

    def __call__(self, event: object) -> None:
        with self._lock:
            self._handle(event)

    def close(self) -> None:
        """The action ended, maybe failed, with stages still drawn: stop drawing them."""
        with self._lock:
            if self._progress is not None:
                self._tasks.clear()
                self._stop()

    def _handle(self, event: object) -> None:
        if isinstance(event, StageStarted):
            self._start(event)
        elif isinstance(event, BatchDone) and event.step_id in self._tasks:
            step = event.step_id
            rows = self._rows[step]
            rows[0] += event.rows_in
            rows[1] += event.rows_out
            self._usage[step] = add_counts(self._usage[step], event.usage)
            self._progress.update(
                self._tasks[step],
                completed=rows[0],
                info=self._info(step, f"{event.busy_actors}/{event.actors} actors busy"),
            )
        elif isinstance(event, StageFinished) and event.step_id in self._tasks:
            self._finish(event)

    def _start(self, event: StageStarted) -> None:
        if self._progress is None:
            from rich.console import Console
            from rich.progress import BarColumn, Progress, TaskProgressColumn, TextColumn
            from rich.text import Text

            if _fd(self.stream) == 2:
                self._foreign = ForeignOutput.take()
            console = Console(file=self._foreign.stream if self._foreign else self.stream)
            self._progress = Progress(
                TextColumn("{task.description}"),
                BarColumn(),
                TaskProgressColumn(),
                TextColumn("{task.fields[info]}"),
                console=console,
                transient=False,
                refresh_per_second=10,
            )
            self._progress.start()
            if self._foreign is not None:
                self._foreign.start(
                    lambda line: console.print(Text.from_ansi(line), soft_wrap=True)
                )
        step = event.step_id
        self._rows[step] = [0, 0]
        self._usage[step] = {}
        self._started[step] = time.perf_counter()
        self._tasks[step] = self._progress.add_task(
            f"{event.step[:40]}:", total=event.total_rows, info=self._info(step, "starting")
        )

    def _info(self, step: int, tail: str) -> str:
        rows_in, rows_out = self._rows[step]
        elapsed = max(time.perf_counter() - self._started[step], 1e-9)
        usage = self._usage.get(step)
        counted = f", {describe_usage(usage)}" if usage else ""
        return (
            f"{rows_in:,} row{'s' * (rows_in != 1)} in, {rows_out:,} out, "
            f"{rows_in / elapsed:,.0f} rows/s{counted}, "
            f"{tail}"
        )

    def _finish(self, event: StageFinished) -> None:
        step = event.step_id
        self._rows[step] = [event.rows_in, event.rows_out]
        self._usage[step] = dict(event.usage)
        extra = ""
        if event.rows_skipped:
            extra += f", {event.rows_skipped:,} skipped"
        if event.rows_nulled:
            extra += f", {event.rows_nulled:,} failed as nulls"
        task = self._tasks.pop(step)
        self._progress.update(
            task,
            completed=event.rows_in,
            total=event.rows_in,
            info=self._info(step, f"done in {event.seconds:.1f} s{extra}"),
        )
        if not self._tasks:
            self._stop()

    def _stop(self) -> None:
        if self._foreign is not None:  # what was written to fd 2 meanwhile: above the lines
            self._foreign.stop()
        self._progress.stop()
        self._progress = None
        if self._foreign is not None:
            self._foreign.close()
            self._foreign = None


def _fd(stream: TextIO) -> int | None:
    try:
        return stream.fileno()
    except (AttributeError, OSError, ValueError):  # io.UnsupportedOperation is an OSError
        return None


def wants_progress(enabled: bool) -> bool:
    return enabled and sys.stderr.isatty()
