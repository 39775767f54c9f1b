"""Progress of the UDF stages on stderr, drawn with rich: per step the rows in and out, rows/s,
actors busy, and a bar with a percentage only when the stage knows its input's size (never a
guessed total). Shown only when stderr is a terminal and ``vane.configure(progress=...)``
allows it; rich is imported when the first stage starts, not at ``import vane``."""

from __future__ import annotations

import sys
import time
from typing import Any, TextIO

from vane.observe.events import (
    BatchDone,
    StageFinished,
    StageStarted,
    add_counts,
    describe_usage,
)


class ProgressDisplay:
    """An event subscriber that draws one line per running stage."""

    def __init__(self, stream: TextIO | None = None) -> None:
        self.stream = stream or sys.stderr
        self._progress: Any = None
        self._tasks: dict[str, Any] = {}
        self._rows: dict[str, list[int]] = {}
        self._usage: dict[str, dict[str, int]] = {}
        self._started: dict[str, float] = {}

    def __call__(self, event: object) -> None:
        if isinstance(event, StageStarted):
            self._start(event)
        elif isinstance(event, BatchDone) and event.step in self._tasks:
            rows = self._rows[event.step]
            rows[0] += event.rows_in
            rows[1] += event.rows_out
            self._usage[event.step] = add_counts(self._usage[event.step], event.usage)
            self._progress.update(
                self._tasks[event.step],
                completed=rows[0],
                info=self._info(event.step, f"{event.busy_actors}/{event.actors} actors busy"),
            )
        elif isinstance(event, StageFinished) and event.step in self._tasks:
            self._finish(event)

    def _start(self, event: StageStarted) -> None:
        if self._progress is None:
            from rich.console import Console
            from rich.progress import BarColumn, Progress, TaskProgressColumn, TextColumn

            self._progress = Progress(
                TextColumn("{task.description}"),
                BarColumn(),
                TaskProgressColumn(),
                TextColumn("{task.fields[info]}"),
                console=Console(file=self.stream),
                transient=False,
                refresh_per_second=10,
            )
            self._progress.start()
        self._rows[event.step] = [0, 0]
        self._usage[event.step] = {}
        self._started[event.step] = time.perf_counter()
        self._tasks[event.step] = self._progress.add_task(
            f"{event.step[:40]}:", total=event.total_rows, info=self._info(event.step, "starting")
        )

    def _info(self, step: str, tail: str) -> str:
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
        self._rows[event.step] = [event.rows_in, event.rows_out]
        self._usage[event.step] = dict(event.usage)
        extra = ""
        if event.rows_skipped:
            extra += f", {event.rows_skipped:,} skipped"
        if event.rows_nulled:
            extra += f", {event.rows_nulled:,} failed as nulls"
        task = self._tasks.pop(event.step)
        self._progress.update(
            task,
            completed=event.rows_in,
            total=event.rows_in,
            info=self._info(event.step, f"done in {event.seconds:.1f} s{extra}"),
        )
        if not self._tasks:
            self._progress.stop()
            self._progress = None


def wants_progress(enabled: bool) -> bool:
    return enabled and sys.stderr.isatty()
