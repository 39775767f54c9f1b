"""A progress line per UDF step on stderr: rows in and out, rows/s, actors busy. Shown only when
stderr is a terminal and ``vane.configure(progress=...)`` allows it."""

from __future__ import annotations

import sys
import time
from typing import TextIO

from vane.observe.events import BatchDone, StageFinished, StageStarted

_REFRESH_SECONDS = 0.1


class ProgressDisplay:
    def __init__(self, stream: TextIO | None = None) -> None:
        self.stream = stream or sys.stderr
        self._started: dict[str, float] = {}
        self._rows: dict[str, tuple[int, int]] = {}
        self._last_draw = 0.0

    def __call__(self, event: object) -> None:
        if isinstance(event, StageStarted):
            self._started[event.step] = time.perf_counter()
            self._rows[event.step] = (0, 0)
        elif isinstance(event, BatchDone):
            rows_in, rows_out = self._rows.get(event.step, (0, 0))
            self._rows[event.step] = (rows_in + event.rows_in, rows_out + event.rows_out)
            now = time.perf_counter()
            if now - self._last_draw >= _REFRESH_SECONDS:
                self._last_draw = now
                self._draw(event.step, f"{event.busy_actors}/{event.actors} actors busy", "\r")
        elif isinstance(event, StageFinished):
            extra = ""
            if event.rows_skipped:
                extra += f", {event.rows_skipped:,} skipped"
            if event.rows_nulled:
                extra += f", {event.rows_nulled:,} failed as nulls"
            self._rows[event.step] = (event.rows_in, event.rows_out)
            self._draw(event.step, f"done in {event.seconds:.1f} s{extra}", "\r", end="\n")

    def _draw(self, step: str, tail: str, start: str, end: str = "") -> None:
        rows_in, rows_out = self._rows[step]
        elapsed = max(time.perf_counter() - self._started.get(step, time.perf_counter()), 1e-9)
        line = (
            f"{step[:40]}: {rows_in:,} rows in, {rows_out:,} out, "
            f"{rows_in / elapsed:,.0f} rows/s, {tail}"
        )
        self.stream.write(f"{start}{line:<100}{end}")
        self.stream.flush()


def wants_progress(enabled: bool) -> bool:
    return enabled and sys.stderr.isatty()
