"""Events the executor emits while a plan runs. Subscribers (the progress display, tests, a
user's own callback) receive them in the thread that emitted them and must return quickly."""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from vane._text import counted


@dataclass(frozen=True)
class StageStarted:
    step: str
    actors: int
    # The rows the stage will read, when that is known without reading them (an in-memory
    # table, a range, Parquet metadata); None when it is not: never a guess.
    total_rows: int | None = None


@dataclass(frozen=True)
class BatchDone:
    step: str
    rows_in: int
    rows_out: int
    busy_actors: int
    actors: int
    # What the UDF counted for these rows (an AI function: requests, prompt_tokens,
    # completion_tokens, retries, cache_hits, failures); empty when it counts nothing.
    usage: Mapping[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class StageFinished:
    """A UDF step's summary: rows, what on_error did, seconds, and its counters summed."""

    step: str
    rows_in: int
    rows_out: int
    rows_skipped: int
    rows_nulled: int
    seconds: float
    usage: Mapping[str, int] = field(default_factory=dict)

    def __str__(self) -> str:
        return f"{self.step}: {self.summary()}"

    def summary(self) -> str:
        """ "100 rows in, 100 out, 1.20 s; 100 requests, 2,310 prompt tokens, ..." """
        text = f"{counted(self.rows_in, 'row')} in, {self.rows_out:,} out"
        if self.rows_skipped:
            text += f", {self.rows_skipped:,} skipped"
        if self.rows_nulled:
            text += f", {self.rows_nulled:,} failed as nulls"
        text += f", {self.seconds:.2f} s"
        if self.usage:
            text += "; " + describe_usage(self.usage)
        return text


def add_counts(a: Mapping[str, int], b: Mapping[str, int]) -> dict[str, int]:
    """Two sets of counters, summed name by name."""
    total = dict(a)
    for name, value in b.items():
        total[name] = total.get(name, 0) + value
    return total


# The order a summary names an AI function's counters in, each as one of it is said; a UDF's
# own counters follow, named as it named them.
_USAGE_ORDER = {
    "requests": "request",
    "prompt_tokens": "prompt token",
    "completion_tokens": "completion token",
    "retries": "retry",
    "cache_hits": "cache hit",
    "failures": "failure",
}


def describe_usage(usage: Mapping[str, int]) -> str:
    """Counters as a summary line says them: "120 requests, 4,512 prompt tokens, 2 retries"."""
    names = [n for n in _USAGE_ORDER if n in usage]
    names += sorted(n for n in usage if n not in _USAGE_ORDER)
    return ", ".join(
        counted(usage[name], _USAGE_ORDER[name], name.replace("_", " "))
        if name in _USAGE_ORDER
        else f"{usage[name]:,} {name.replace('_', ' ')}"
        for name in names
    )


Subscriber = Callable[[object], None]


class EventBus:
    def __init__(self) -> None:
        self._subscribers: list[Subscriber] = []
        self._lock = threading.Lock()

    def subscribe(self, subscriber: Subscriber) -> None:
        with self._lock:
            self._subscribers.append(subscriber)

    @property
    def listening(self) -> bool:
        return bool(self._subscribers)

    def emit(self, event: object) -> None:
        for subscriber in list(self._subscribers):
            subscriber(event)


_global_subscribers: list[Subscriber] = []


def subscribe(subscriber: Subscriber) -> Callable[[], None]:
    """Receive the events of every run in this process; returns a function that unsubscribes."""
    _global_subscribers.append(subscriber)
    return lambda: _global_subscribers.remove(subscriber)


def global_subscribers() -> list[Subscriber]:
    return list(_global_subscribers)


def action_events() -> EventBus:
    """The events of one action: to every subscriber of the process, and to the progress
    display when ``vane.configure(progress=...)`` allows it and stderr is a terminal."""
    from vane.config import get_config
    from vane.observe.progress import ProgressDisplay, wants_progress

    events = EventBus()
    for subscriber in global_subscribers():
        events.subscribe(subscriber)
    if wants_progress(get_config().progress):
        events.subscribe(ProgressDisplay())
    return events
