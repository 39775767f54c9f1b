"""Progress of the UDF stages on stderr, drawn with rich: per step the rows in and out, rows/s,
actors busy, and, when the stage knows how many rows it will read (``StageStarted.total_rows``,
never a guess), a bar with a percentage and the time left. A step that sends requests to
servers (an AI function over HTTP: ``vane.ai.serve``'s server per node, or any
OpenAI-compatible one) says, per server, how many are in flight now, sent and retried
(``ServerRequests``). Shown only when stderr is a terminal and ``vane.configure(progress=...)``
allows it; rich is imported when the first stage starts, not at ``import vane``. While the
lines are drawn, what reaches fd 2 below Python is printed above them (``foreign_output.py``).
They end with their stages, or with the action (``close``) when a stage failed.

What a line says is decided by ``StageLine`` from the events and a clock, and nothing else, so
the same events and times always draw the same text.
"""

from __future__ import annotations

import io
import sys
import threading
import time
from collections.abc import Callable
from typing import Any, TextIO

from vane.observe.events import (
    BatchDone,
    ServerCount,
    ServerRequests,
    StageFinished,
    StageStarted,
    StageWaiting,
    add_counts,
    describe_usage,
)
from vane.observe.foreign_output import ForeignOutput


class StageLine:
    """One stage's line: its counts so far, and the text drawn after its bar at a given time.

    Its rate is measured from the end of its first answered batch on, when it has answered
    more since: the time before that holds its actors' start (a model's load), which would make
    a long job's rate, and so its time left, look far worse than it is."""

    def __init__(self, event: StageStarted, now: float) -> None:
        self.total = event.total_rows
        self.actors = event.actors
        self.busy = 0
        self.started = now
        self.rows_in = self.rows_out = 0
        self.resumed = 0  # rows a resumable write answered from saved work: no rate of theirs
        self.usage: dict[str, int] = {}
        self._first: tuple[float, int] | None = None  # when the first batch came, its rows
        self._last = now  # when the latest batch came
        self.finished: StageFinished | None = None
        self.waiting: str | None = None  # what it waits for (StageWaiting), until a batch comes
        self.servers: tuple[ServerCount, ...] = ()  # its requests per server (ServerRequests)

    def batch(self, event: BatchDone, now: float) -> None:
        self.rows_in += event.rows_in
        self.rows_out += event.rows_out
        self.resumed += event.rows_resumed
        self.busy, self.actors = event.busy_actors, event.actors
        self.usage = add_counts(self.usage, event.usage)
        self._last = now
        self.waiting = None
        if self._first is None and event.rows_resumed < event.rows_in:
            self._first = (now, self.rows_in)

    def finish(self, event: StageFinished) -> None:
        self.rows_in, self.rows_out = event.rows_in, event.rows_out
        self.usage = dict(event.usage)
        self.finished = event

    def rate(self) -> float | None:
        """Rows in per second, None before any row is in."""
        if self.finished is not None:
            seconds = self.finished.seconds
            return self.rows_in / seconds if seconds > 0 else None
        if self._first is not None:
            since, rows = self._first
            if self.rows_in > rows and self._last > since:
                return (self.rows_in - rows) / (self._last - since)
        seconds = self._last - self.started
        computed = self.rows_in - self.resumed
        return computed / seconds if computed and seconds > 0 else None

    def seconds_left(self, now: float) -> float | None:
        """The time left at ``now``: the rows still to read at the rate so far, less the time
        since the latest batch; None without a total or a rate."""
        rate = self.rate()
        if self.total is None or rate is None or self.finished is not None:
            return None
        left = max(self.total - self.rows_in, 0) / rate - (now - self._last)
        return max(left, 0.0)

    def text(self, now: float) -> str:
        """``1,200 of 5,000 rows in, 1,200 out, 400 rows/s, 2 requests, ETA 9s, 2/2 actors
        busy``: what the line says after its bar at ``now``; while the stage runs, then each
        server it sends requests to, ``; http://127.0.0.1:8000/v1: 3 in flight, 120 sent``."""
        done = self.finished
        rows = "row" if self.rows_in == 1 and (self.total is None or done) else "rows"
        if self.total is not None and done is None:
            parts = [f"{self.rows_in:,} of {self.total:,} {rows} in"]
        else:
            parts = [f"{self.rows_in:,} {rows} in"]
        parts.append(f"{self.rows_out:,} out")
        if self.resumed:
            parts.append(f"{self.resumed:,} answered by the saved run")
        rate = self.rate()
        if rate is not None:
            parts.append(f"{rate:,.{1 if rate < 10 else 0}f} rows/s")
        if self.usage:
            parts.append(describe_usage(self.usage))
        if done is not None:
            parts.append(f"done in {done.seconds:.1f} s")
            if done.rows_skipped:
                parts.append(f"{done.rows_skipped:,} skipped")
            if done.rows_nulled:
                parts.append(f"{done.rows_nulled:,} failed as nulls")
            return ", ".join(parts)
        left = self.seconds_left(now)
        if left is not None:
            parts.append(f"ETA {duration(left)}")
        if self.waiting is not None:
            parts.append(self.waiting)
        elif self._first is None:
            if not any(c.sent for c in self.servers):  # (else its actors are up, and asking)
                parts.append("starting")
        else:
            parts.append(f"{self.busy}/{self.actors} actors busy")
        return "; ".join([", ".join(parts), *(c.describe() for c in self.servers)])


def duration(seconds: float) -> str:
    """``42s``, ``3m 05s``, ``2h 03m``: a time left, as precise as is worth reading."""
    whole = int(seconds + 0.5)
    if whole < 60:
        return f"{whole}s"
    if whole < 3600:
        return f"{whole // 60}m {whole % 60:02d}s"
    return f"{whole // 3600}h {whole % 3600 // 60:02d}m"


class ProgressDisplay:
    """An event subscriber that draws one line per running stage. ``clock`` gives the time in
    seconds (``time.perf_counter`` unless a test gives its own)."""

    def __init__(
        self, stream: TextIO | None = None, clock: Callable[[], float] = time.perf_counter
    ) -> None:
        self.stream = stream or sys.stderr
        self.clock = clock
        self._progress: Any = None
        # By step_id: two steps of one function are two lines.
        self._tasks: dict[int, Any] = {}
        self._lines: dict[int, StageLine] = {}
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
            line = self._lines[event.step_id]
            line.batch(event, self.clock())
            self._progress.update(self._tasks[event.step_id], completed=line.rows_in)
        elif isinstance(event, ServerRequests) and event.step_id in self._tasks:
            self._lines[event.step_id].servers = event.servers
        elif isinstance(event, StageWaiting) and event.step_id in self._tasks:
            # Until the next batch, the line says why nothing moves
            self._lines[event.step_id].waiting = event.state
        elif isinstance(event, StageFinished) and event.step_id in self._tasks:
            self._finish(event)

    def _start(self, event: StageStarted) -> None:
        if self._progress is None:
            from rich.console import Console
            from rich.text import Text

            if _fd(self.stream) == 2:
                self._foreign = ForeignOutput.take()
            console = Console(file=self._foreign.stream if self._foreign else self.stream)
            self._progress = _rich_progress(self, console)
            self._progress.start()
            if self._foreign is not None:
                self._foreign.start(
                    lambda line: console.print(Text.from_ansi(line), soft_wrap=True)
                )
        self._lines[event.step_id] = StageLine(event, self.clock())
        self._tasks[event.step_id] = self._progress.add_task(
            f"{event.step[:40]}:", total=event.total_rows, step=event.step_id
        )

    def line(self, step_id: int) -> str:
        """What step ``step_id``'s line says after its bar, now."""
        return self._lines[step_id].text(self.clock())

    def text(self, width: int = 120) -> str:
        """The lines as they are drawn now, as plain text (what a log or a test reads); empty
        once every stage has finished."""
        if self._progress is None:
            return ""
        from rich.console import Console

        out = io.StringIO()
        Console(file=out, width=width, color_system=None).print(self._progress.get_renderable())
        return out.getvalue()

    def _finish(self, event: StageFinished) -> None:
        line = self._lines[event.step_id]
        line.finish(event)
        task = self._tasks.pop(event.step_id)
        self._progress.update(task, completed=event.rows_in, total=event.rows_in)
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


def _rich_progress(display: ProgressDisplay, console: Any) -> Any:
    from rich.progress import BarColumn, Progress, ProgressColumn, TaskProgressColumn, TextColumn
    from rich.text import Text

    class LineColumn(ProgressColumn):
        """The text after the bar, drawn anew at each refresh: the time left counts down."""

        def render(self, task: Any) -> Text:
            return Text(display.line(task.fields["step"]))

    return Progress(
        # Not markup: an AI function's step is named "prompt[openai m via vllm-1a2b3c](q)",
        # whose brackets rich would take for a style and drop
        TextColumn("{task.description}", markup=False),
        BarColumn(bar_width=24),
        TaskProgressColumn(),  # a percentage, only when the total is known
        LineColumn(),
        console=console,
        transient=False,
        refresh_per_second=10,
        get_time=display.clock,
    )


def wants_progress(enabled: bool) -> bool:
    return enabled and sys.stderr.isatty()
