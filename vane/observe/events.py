"""Events the executor emits while a plan runs. Subscribers (the progress display, tests, a
user's own callback) receive them in the thread that emitted them and must return quickly."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass


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


@dataclass(frozen=True)
class StageFinished:
    step: str
    rows_in: int
    rows_out: int
    rows_skipped: int
    rows_nulled: int
    seconds: float


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
