"""Events the executor emits while a plan runs. Subscribers (the progress display, tests, a
user's own callback) receive them in the thread that emitted them and must return quickly.

Each event names its UDF step twice: ``step``, what the user reads (the function's name, or
the step's label), and ``step_id``, the step's identity in the plan (``UdfStep.step_id``):
two steps of one function share a name, never an id.

Subscribers watch the work; they never take part in it. One that raises is logged (once per
subscriber) and the action goes on; the others still receive every event. A subscriber is
called by one thread at a time, though the stages that emit run on several threads (and
actions may run side by side on several threads of the process).
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from vane._text import counted


@dataclass(frozen=True)
class StageStarted:
    step: str
    step_id: int
    actors: int
    # The rows the stage will read, when that is certain before it starts (a range, an
    # in-memory table, Parquet footers, through steps that keep each row, capped by a limit:
    # vane/execution/totals.py); None when it is not: never an estimate or an upper bound.
    total_rows: int | None = None


@dataclass(frozen=True)
class BatchDone:
    step: str
    step_id: int
    rows_in: int
    rows_out: int
    busy_actors: int
    actors: int
    # What the UDF counted for these rows (an AI function: requests, prompt_tokens,
    # completion_tokens, retries, cache_hits, failures); empty when it counts nothing.
    usage: Mapping[str, int] = field(default_factory=dict)
    # Of rows_in, those a resumable write answered from a killed run's saved work.
    rows_resumed: int = 0


@dataclass(frozen=True)
class StageWaiting:
    """A stage that waits for resources (so far: on Ray, for CPUs, GPUs or memory the cluster
    does not free), and what it waits for: "waiting for 1 CPU (...): 2 of 2 CPUs held by 2
    actors of `Embedder`"; ``state`` None when the wait is over."""

    step: str
    step_id: int
    state: str | None


@dataclass(frozen=True)
class ServerCount:
    """One server's requests from one step: ``in_flight`` sent and not yet answered now,
    ``sent`` so far (each attempt, retries included), ``retried`` of those. ``server`` says
    which server: its base URL, and its node when it is one of several (``vane.ai.serve`` on
    Ray)."""

    server: str
    in_flight: int = 0
    sent: int = 0
    retried: int = 0

    def describe(self) -> str:
        """``http://127.0.0.1:8000/v1: 3 in flight, 120 sent, 2 retried``"""
        text = f"{self.server}: {self.in_flight:,} in flight, {self.sent:,} sent"
        return text + (f", {self.retried:,} retried" if self.retried else "")


@dataclass(frozen=True)
class ServerRequests:
    """What a step's requests to each server it talks to are doing now (an AI function's over
    HTTP: ``vane.ai.serve``'s servers, any OpenAI-compatible one), sent as they change
    (coalesced per actor: a few times a second at most, and before each batch's result), not
    only per batch: a batch of held requests shows while it is held. ``servers`` holds every
    server the step has asked so far, in the order of their names, each summed over the
    step's actors."""

    step: str
    step_id: int
    servers: tuple[ServerCount, ...]


def merge_servers(counts: Iterable[Iterable[ServerCount]]) -> tuple[ServerCount, ...]:
    """Several actors' counts, summed server by server, in the order of the servers' names."""
    total: dict[str, list[int]] = {}
    for actor in counts:
        for count in actor:
            summed = total.setdefault(count.server, [0, 0, 0])
            summed[0] += count.in_flight
            summed[1] += count.sent
            summed[2] += count.retried
    return tuple(ServerCount(name, *total[name]) for name in sorted(total))


@dataclass(frozen=True)
class StageFinished:
    """A UDF step's summary: rows, what on_error did, seconds, and its counters summed."""

    step: str
    step_id: int
    rows_in: int
    rows_out: int
    rows_skipped: int
    rows_nulled: int
    seconds: float
    usage: Mapping[str, int] = field(default_factory=dict)
    # Rows whose answers a resumable write took from the work a killed run had saved.
    rows_resumed: int = 0
    # Seconds the function's calls took, summed over its batches: over ``seconds`` times the
    # actors, how busy they kept the function (a sync function's; an async function's calls
    # overlap, each counted).
    busy_seconds: float = 0.0

    def __str__(self) -> str:
        return f"{self.step}: {self.summary()}"

    def summary(self) -> str:
        """ "100 rows in, 100 out, 1.20 s; 100 requests, 2,310 prompt tokens, ..." """
        text = f"{counted(self.rows_in, 'row')} in, {self.rows_out:,} out"
        if self.rows_skipped:
            text += f", {self.rows_skipped:,} skipped"
        if self.rows_nulled:
            text += f", {self.rows_nulled:,} failed as nulls"
        if self.rows_resumed:
            text += f", {self.rows_resumed:,} answered by the saved run"
        text += f", {self.seconds:.2f} s"
        if self.busy_seconds:
            text += f" ({self.busy_seconds:.2f} s in the function)"
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
    "batch_requests": "batch request",
    "prompt_tokens": "prompt token",
    "completion_tokens": "completion token",
    "batch_prompt_tokens": "batch prompt token",
    "batch_completion_tokens": "batch completion token",
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

log = logging.getLogger("vane")


class _Guarded:
    """A subscriber called by one thread at a time, whose errors stay its own."""

    def __init__(self, subscriber: Subscriber) -> None:
        self.subscriber = subscriber
        # Reentrant: a subscriber that starts an action of its own hears that action too.
        self._lock = threading.RLock()
        self._failed = False

    def __call__(self, event: object) -> None:
        with self._lock:
            try:
                self.subscriber(event)
            except Exception:
                if not self._failed:
                    self._failed = True
                    log.warning(
                        "the event subscriber %r raised on %s; the action goes on without its "
                        "answer (its later errors are not logged)",
                        self.subscriber,
                        type(event).__name__,
                        exc_info=True,
                    )


class EventBus:
    def __init__(self) -> None:
        self._subscribers: list[_Guarded] = []
        self._lock = threading.Lock()
        self._on_close: list[Callable[[], None]] = []

    def on_close(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` when the action ends, however it ends."""
        self._on_close.append(callback)

    def close(self) -> None:
        """The action ended (done, failed or interrupted): what it alone listened with stops."""
        callbacks, self._on_close = self._on_close, []
        for callback in callbacks:
            try:
                callback()
            except Exception:
                log.warning(
                    "ending %r raised; the action ends all the same", callback, exc_info=True
                )

    def subscribe(self, subscriber: Subscriber | _Guarded) -> None:
        guarded = subscriber if isinstance(subscriber, _Guarded) else _Guarded(subscriber)
        with self._lock:
            self._subscribers.append(guarded)

    @property
    def listening(self) -> bool:
        return bool(self._subscribers)

    def emit(self, event: object) -> None:
        with self._lock:
            subscribers = list(self._subscribers)
        for subscriber in subscribers:
            subscriber(event)


# Guarded once, so that every action's bus shares each subscriber's lock.
_global_subscribers: list[_Guarded] = []
_global_lock = threading.Lock()


def subscribe(subscriber: Subscriber) -> Callable[[], None]:
    """Receive the events of every run in this process; returns a function that unsubscribes."""
    guarded = _Guarded(subscriber)
    with _global_lock:
        _global_subscribers.append(guarded)

    def unsubscribe() -> None:
        with _global_lock, contextlib.suppress(ValueError):
            _global_subscribers.remove(guarded)

    return unsubscribe


def global_subscribers() -> list[_Guarded]:
    with _global_lock:
        return list(_global_subscribers)


def step_names(steps: Sequence[StageFinished]) -> list[str]:
    """The steps' names, each unique: a name that several steps share gets its position among
    them ("embed", "embed #2"), so that a summary keyed by name loses none of them."""
    taken: set[str] = set()
    names = []
    for step in steps:
        name, count = step.step, 1
        while name in taken:
            count += 1
            name = f"{step.step} #{count}"
        taken.add(name)
        names.append(name)
    return names
