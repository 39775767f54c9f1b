"""The interface every actor pool shares, and the dispatch logic they have in common.

A pool starts ``min`` actors (each constructs the UDF once, inside its own thread or process),
takes batches with ``submit`` (returning a future of the batch's outcome), may grow towards
``max`` actors with ``scale_up``, and tears everything down with ``teardown``.
"""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from concurrent.futures import Future, ThreadPoolExecutor

import pyarrow as pa

from vane.errors import UDFError, VaneError
from vane.udf.runtime import BatchOutcome, Task, describe_exception
from vane.udf.spec import UdfSpec


class Actor(ABC):
    """One constructed UDF instance, in a thread or a process."""

    index: int

    @property
    def alive(self) -> bool:
        """False once the actor is known to be gone (its process died); no batch goes to it."""
        return True

    @abstractmethod
    def submit(self, task: Task) -> Future[BatchOutcome]: ...

    @abstractmethod
    def stop(self, *, graceful: bool = True) -> None: ...


class ActorPool(ABC):
    def __init__(self, spec: UdfSpec, schema: pa.Schema, step: str) -> None:
        self.spec = spec
        self.schema = schema
        self.step = step
        self.actors: list[Actor] = []
        self._load: dict[int, int] = {}
        self._lock = threading.Lock()
        # Signalled when an actor joins the pool (a replacement for a dead one, say).
        self._joined = threading.Condition(self._lock)
        self._broken: BaseException | None = None
        self._closed = False
        self._next_index = 0

    # ---- lifecycle -------------------------------------------------------------------------

    def start(self) -> None:
        """Start the minimum number of actors, side by side (each may take seconds to load a
        model); a UDF whose constructor raises fails here, and the others are stopped."""
        ex = ThreadPoolExecutor(self.spec.min_actors, thread_name_prefix="vane-start")
        try:
            starts = [ex.submit(self._add_actor) for _ in range(self.spec.min_actors)]
            ex.shutdown(wait=True)
        except BaseException:
            # An interrupt while actors load: close the pool so that each start still running
            # stops its actor as soon as it is up, instead of leaving it behind.
            ex.shutdown(wait=False, cancel_futures=True)
            self.teardown(graceful=False)
            raise
        errors = [e for e in (f.exception() for f in starts) if e is not None]
        if errors:
            self.teardown(graceful=False)
            if isinstance(errors[0], VaneError):
                raise errors[0]
            raise UDFError(
                f"{self.spec.verb} step `{self.step}`: constructing {self.spec.name} failed: "
                f"{describe_exception(errors[0])}. Its traceback is shown above; the "
                "constructor runs once per actor, inside the worker"
            ) from errors[0]

    def _add_actor(self) -> None:
        with self._lock:
            index = self._next_index
            self._next_index += 1
        self._join(self._start_actor(index))

    def _join(self, actor: Actor) -> None:
        with self._lock:
            closed = self._closed
            if not closed:
                self.actors.append(actor)
                self._load[actor.index] = 0
                self._joined.notify_all()
        if closed:  # it finished starting after teardown: nobody will use or stop it
            actor.stop(graceful=False)

    def _break(self, error: BaseException) -> None:
        """No actor can be started any more: every later ``submit`` raises ``error``."""
        with self._lock:
            self._broken = error
            self._joined.notify_all()

    @abstractmethod
    def _start_actor(self, index: int) -> Actor: ...

    def teardown(self, *, graceful: bool = True) -> None:
        """Stop every actor; ``graceful=False`` (after a failure) drops queued batches and does
        not wait for running ones where the backend can avoid it. Actors that finish starting
        later stop themselves (see ``_join``)."""
        with self._lock:
            self._closed = True
            actors, self.actors = list(self.actors), []
            self._joined.notify_all()
        for actor in actors:
            actor.stop(graceful=graceful)

    # ---- work --------------------------------------------------------------------------------

    @property
    def slots_per_actor(self) -> int:
        """Batches worth keeping in flight on one actor: an async UDF overlaps up to its limit;
        a sync one gets a second batch queued so it never waits for the next."""
        return self.spec.max_concurrency_per_actor if self.spec.is_async else 2

    @property
    def capacity(self) -> int:
        return max(1, len(self.actors)) * self.slots_per_actor

    def can_scale_up(self) -> bool:
        return len(self.actors) < self.spec.max_actors

    def scale_up(self) -> None:
        if self.can_scale_up():
            self._add_actor()

    def busy_actors(self) -> int:
        with self._lock:
            return sum(1 for load in self._load.values() if load)

    def saturated(self) -> bool:
        """Every actor holds as many batches as it usefully can: work is queueing."""
        with self._lock:
            return bool(self._load) and all(
                load >= self.slots_per_actor for load in self._load.values()
            )

    def submit(self, task: Task) -> Future[BatchOutcome]:
        """Send the batch to the least-loaded actor."""
        with self._lock:
            while True:
                if self._broken is not None:
                    raise self._broken
                if self._closed:
                    raise RuntimeError("the actor pool is closed")
                alive = [a for a in self.actors if a.alive]
                if alive:
                    break
                self._joined.wait()  # only while a dead actor's replacement starts
            actor = min(alive, key=lambda a: self._load[a.index])
            self._load[actor.index] += 1
        future = actor.submit(task)
        future.add_done_callback(lambda _: self._done(actor.index))
        return future

    def _done(self, index: int) -> None:
        with self._lock:
            if index in self._load:
                self._load[index] -= 1
