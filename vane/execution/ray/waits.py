"""Waiting for resources while an action runs on Ray: seen, said, and bounded.

``fit.py`` refuses a plan whose own actors would starve it, but a cluster can still leave an
action waiting: other work holds the GPUs, a node was lost, an autoscaler has yet to add one.
Ray says nothing then; the action just stops. So while an action runs, each poll of its
progress also asks the cluster what it has free and which requests it has not placed, and
decides whether the action is waiting for resources: the driver waits on Ray, nothing moved
since the last poll (rows, actors, Ray's tasks, part files), no actor runs a batch or is
starting, and a request shaped as one of the action's (an actor of a step below its minimum, a
1-CPU task) finds no room. A wait that lasts ``NOTICE_S`` becomes the progress line's state
("waiting for 1 CPU (...): 2 of 2 CPUs held by 2 actors of `Embedder`"); one that lasts
``resource_wait_timeout_s`` fails the action with a ``ResourceWaitError`` saying the same.

The decision takes what a poll saw and the time as arguments (``ResourceWatch.observe``), so
what it decides can be tested without waiting for a clock; ``watching.py`` connects it to Ray.
"""

from __future__ import annotations

import itertools
import threading
import weakref
from collections.abc import Hashable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, ClassVar

from vane.errors import ResourceWaitError
from vane.execution.ray.fit import TASK_CPUS, Pool, amount

# A wait shorter than this is scheduling, not a state worth a line.
NOTICE_S = 5.0
_TASK = {"CPU": float(TASK_CPUS)}
_TASKS = "a read, SQL or write task"


# What the cluster says in a poll: its resources in all, those free, and the requests it has
# not placed, each shape once (None: it does not say).
Load = tuple[dict[str, float], dict[str, float], list[dict[str, float]] | None]


@dataclass(frozen=True)
class Sample:
    """What one poll saw."""

    moved: Hashable  # everything that counts as progress; any change is progress
    working: bool  # an actor runs a batch, or is starting (its model loading)
    pulling: bool  # the driver is waiting on Ray (not off in the user's code, or DuckDB's)
    actors: Mapping[int, int]  # by step id: actors that hold their resources (up or starting)
    total: Mapping[str, float]
    free: Mapping[str, float]
    # Requests the cluster has not placed, each once (None: the cluster does not say).
    pending: Sequence[Mapping[str, float]] | None


@dataclass(frozen=True)
class Wait:
    """What waits, for which resources, and what holds them."""

    waiting: str  # "1 actor of `F`", "Ray Data's tasks: ..."
    needs: Mapping[str, float]  # what one of them asks for and finds no room for
    held: str  # "4 of 4 GPUs held by other work on the cluster"
    by_others: bool  # other work than the action's actors holds some of it

    @property
    def wanted(self) -> str:
        return ", ".join(amount(r, v) for r, v in self.needs.items())

    def line(self) -> str:
        """The progress line's state."""
        return f"waiting for {self.wanted} ({self.waiting}): {self.held}"


def decide(pools: Sequence[Pool], sample: Sample) -> Wait | None:
    """Whether the action waits for resources now (``ResourceWatch`` says for how long)."""
    if sample.working or not sample.pulling:
        return None
    for pool in pools:
        missing = pool.actors - sample.actors.get(pool.step.step_id, 0)
        shape = {r: v for r, v in pool.each.items() if v}
        asked = sample.pending is None or any(_same(shape, p) for p in sample.pending)
        if missing > 0 and asked and not _fits(shape, sample.free):
            actors = "1 actor" if missing == 1 else f"{missing} actors"
            return _wait(f"{actors} of `{pool.name}`", shape, pools, sample)
    tasks_wait = sample.pending is not None and any(_same(_TASK, p) for p in sample.pending)
    if tasks_wait and not _fits(_TASK, sample.free):
        return _wait(_TASKS, _TASK, pools, sample)
    return None


def _wait(waiting: str, needs: Mapping[str, float], pools: Sequence[Pool], sample: Sample) -> Wait:
    """Who holds the first resource of ``needs`` that has no room: the action's actors, by
    step, and other work (another job's, or a task of this action's that runs)."""
    resource = next(r for r, v in needs.items() if sample.free.get(r, 0.0) < v)
    total = sample.total.get(resource, 0.0)
    used = total - sample.free.get(resource, 0.0)
    parts = []
    ours = 0.0
    for pool in pools:
        actors = sample.actors.get(pool.step.step_id, 0)
        holds = actors * pool.each.get(resource, 0.0)
        if holds:
            ours += holds
            named = "1 actor" if actors == 1 else f"{actors} actors"
            parts.append((holds, f"{named} of `{pool.name}`"))
    others = used - ours
    if others > 1e-9:
        parts.append((others, "other work on the cluster"))
    of = f"{used:g} of {amount(resource, total)}"
    if not parts:
        held = f"{of} held" if total else f"the cluster has no {resource}"
    elif len(parts) == 1:
        held = f"{of} held by {parts[0][1]}"
    else:
        held = f"{of} held: " + ", ".join(f"{value:g} by {who}" for value, who in parts)
    return Wait(waiting, dict(needs), held, by_others=others > 1e-9 or not parts)


def _same(shape: Mapping[str, float], request: Mapping[str, float]) -> bool:
    keys = {k for k, v in shape.items() if v} | {k for k, v in request.items() if v}
    return all(abs(shape.get(k, 0.0) - request.get(k, 0.0)) < 1e-9 for k in keys)


def _fits(shape: Mapping[str, float], free: Mapping[str, float]) -> bool:
    return all(free.get(r, 0.0) >= v - 1e-9 for r, v in shape.items())


class ResourceWatch:
    """One action's watch: how long it has waited, the state to show, and the failure once
    the wait outlasts ``timeout_s``. The poller calls ``observe``; the threads that wait on
    Ray say so with ``pulling``; Ray Data's executions report their progress with ``moved``."""

    _keys: ClassVar[Iterator[int]] = itertools.count(1)
    _live: ClassVar[weakref.WeakValueDictionary[int, ResourceWatch]] = weakref.WeakValueDictionary()

    def __init__(self, pools: Sequence[Pool], timeout_s: float) -> None:
        self.pools = list(pools)
        self.timeout_s = timeout_s
        self.key = next(self._keys)
        self.failure: ResourceWaitError | None = None
        self.state: Wait | None = None
        self._since: float | None = None
        self._moved: Hashable = object()  # the first sample is movement
        self._lock = threading.Lock()
        self._pulling = 0
        self._ray_progress: dict[Hashable, Hashable] = {}
        # The action's actors as they start (``hosts.py``), so that a failed action can kill
        # them at once rather than when they are collected.
        self._actors: weakref.WeakSet[Any] = weakref.WeakSet()
        self._live[self.key] = self

    @classmethod
    def of(cls, key: object) -> ResourceWatch | None:
        return cls._live.get(key) if isinstance(key, int) else None

    @contextmanager
    def pulling(self) -> Iterator[None]:
        """Around a wait on Ray: only then can the action be stalled by Ray's resources."""
        with self._lock:
            self._pulling += 1
        try:
            yield
        finally:
            with self._lock:
                self._pulling -= 1

    @property
    def is_pulling(self) -> bool:
        with self._lock:
            return self._pulling > 0

    def started(self, actor: Any) -> None:
        """An actor of the action's, to kill should the action fail."""
        with self._lock:
            self._actors.add(actor)

    def released(self, actor: Any) -> None:
        """An actor kept for the next action (``parked.py``): no longer this action's to kill
        should it fail (another action may take it meanwhile)."""
        with self._lock:
            self._actors.discard(actor)

    def started_actors(self) -> list[Any]:
        with self._lock:
            return list(self._actors)

    def moved(self, source: Hashable, progress: Hashable) -> None:
        """Progress that the tally does not see: a Ray Data execution's, part files written."""
        with self._lock:
            self._ray_progress[source] = progress

    def ray_progress(self) -> Hashable:
        with self._lock:
            return tuple(self._ray_progress.items())

    def observe(self, sample: Sample, now: float) -> Wait | None:
        """The wait to show after this poll (None: none, or not for long yet); sets
        ``failure`` once the action has waited ``timeout_s`` with nothing moving."""
        wait = decide(self.pools, sample)
        moved = sample.moved != self._moved
        self._moved = sample.moved
        if wait is None:
            self._since = None
            self.state = None
            return None
        if moved or self._since is None:
            self._since = now
        waited = now - self._since
        if waited >= self.timeout_s and self.failure is None:
            self.failure = ResourceWaitError(_timed_out(wait, waited))
        self.state = wait if waited >= NOTICE_S or self.failure is not None else None
        return self.state

    def close(self) -> None:
        self._live.pop(self.key, None)


def _timed_out(wait: Wait, waited: float) -> str:
    holder = (
        "Other work on the cluster holds what the pipeline needs: free it, or add nodes with "
        "more of it"
        if wait.by_others
        else "The pipeline's own actors hold what it needs: lower a step's concurrency, cpus "
        "or gpus, or add nodes"
    )
    return (
        f"the Ray action waited {waited:.0f} s, with nothing moving, for {wait.wanted} for "
        f"{wait.waiting}: {wait.held}. {holder}; or wait longer with "
        "vane.configure(resource_wait_timeout_s=...) (math.inf: as long as it takes)"
    )
