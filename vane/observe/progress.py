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
    StageWaiting,
    add_counts,
    describe_usage,
)


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

    def __call__(self, event: object) -> None:
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
        elif isinstance(event, StageWaiting) and event.step_id in self._tasks:
            # Until the next batch, the line says why nothing moves
            step = event.step_id
            tail = event.state or f"{'resumed' if self._rows[step][0] else 'starting'}"
            self._progress.update(self._tasks[step], info=self._info(step, tail))
        elif isinstance(event, StageFinished) and event.step_id in self._tasks:
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
            self._progress.stop()
            self._progress = None


def wants_progress(enabled: bool) -> bool:
    return enabled and sys.stderr.isatty()
