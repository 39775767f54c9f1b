"""What every actor pool shares: starting actors, sending each batch to the least-loaded one,
replacing an actor that is lost, and carrying out what the recovery policy decides for the
batches it held.

A pool starts ``min`` actors side by side (each constructs the UDF once, inside its thread or
process, within ``actor_start_timeout_s``), takes batches with ``submit`` (a future of the
batch's outcome), may grow towards ``max`` actors with ``scale_up``, and ends with ``teardown``
(or ``abort``, which fails every unfinished batch and waits for nothing); an action that
needs no more of the step's output (a ``limit`` met, a stream closed) ends it early, which is
graceful too: unstarted batches are dropped, and every actor runs its UDF's ``teardown()``.

An actor is *lost* when its process dies or a call overruns ``batch_timeout_s`` and cannot be
stopped. The pool starts a replacement in its place and sends the batches that never started
elsewhere; what becomes of the batch that was running (sent again, split, failed, or settled as
a poison row) is the recovery policy's to decide (``recovery.py``), and the pool's to carry out.

Each actor holds one *GPU share* (``Actor.gpu_share``, 0 .. ``max_actors`` - 1): which of the
pool's GPUs its process may see (``warm.share_devices``). Shares are handed out lowest first
and come back when an actor goes, so a replacement sees the devices of the actor it replaces.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import threading
from abc import ABC, abstractmethod
from collections.abc import Callable
from concurrent.futures import Future, InvalidStateError, wait
from dataclasses import replace
from typing import Any

import pyarrow as pa

from vane._background import in_background
from vane.errors import ExecutionError, UDFError, VaneError
from vane.execution.actors.body import Result, batches_in_flight
from vane.execution.actors.recovery import GiveUp, Loss, PoisonRow, Recovery, Retry, Split
from vane.observe.events import ServerCount, merge_servers
from vane.observe.requests import report_safely
from vane.udf.failures import describe_exception
from vane.udf.runtime import BatchOutcome, Task
from vane.udf.spec import UdfSpec

log = logging.getLogger("vane")


class Request:
    """A batch, or a piece of one being bisected, and the deaths it has survived."""

    __slots__ = ("deaths", "future", "task")

    def __init__(self, task: Task) -> None:
        self.task = task
        self.future: Future[BatchOutcome] = Future()
        self.deaths = 0


def _resolve(
    future: Future[BatchOutcome], result: BatchOutcome | None = None, error: Any = None
) -> None:
    """Settle ``future`` unless it already is (cancelled by the stage, failed by an abort)."""
    try:
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(result)  # type: ignore[arg-type]
    except InvalidStateError:
        pass


class StartTimeout(Exception):
    """An actor's UDF was not constructed within ``actor_start_timeout_s``."""


def wait_ready(ready: Future[Any], timeout: float | None) -> None:
    """Wait for an actor's constructor: its error raises, and so does ``StartTimeout``."""
    done, _ = wait([ready], timeout)
    if not done:
        raise StartTimeout
    ready.result()


class Actor(ABC):
    """The driver's handle on one actor: the batches it holds, by token, in the order sent."""

    # Said of an actor given up on while its code still runs (a thread cannot be stopped).
    abandon_note = ""

    def __init__(self, pool: ActorPool, index: int, gpu_share: int) -> None:
        self.pool = pool
        self.index = index
        self.gpu_share = gpu_share  # which share of the pool's GPUs it holds
        self._pending: dict[int, Request] = {}
        self._tokens = itertools.count()
        self._lock = threading.Lock()
        self._dead = False
        self.stopping = False

    @property
    def alive(self) -> bool:
        """False once the actor is lost; no batch goes to it."""
        return not self._dead

    def submit(self, request: Request) -> None:
        with self._lock:
            dead = self._dead
            if not dead:
                token = next(self._tokens)
                self._pending[token] = request
        if dead:  # lost after the pool chose it
            self.pool._redispatch(self, request)
            return
        self._send(token, request.task)

    def _delivered(self, token: int, result: Result) -> None:
        with self._lock:
            request = self._pending.pop(token, None)
        if request is not None:  # else the actor was already given up on
            self.pool._finished(self, request, result)

    def _lose(self, charge: Callable[[int, int], Loss | None]) -> None:
        """The actor is gone: hand back its unfinished batches, each with the loss it is
        charged, from ``charge(position in send order, token)`` (None: it never started)."""
        with self._lock:
            self._dead = True
            orphans = list(self._pending.items())
            self._pending.clear()
        if not self.stopping:
            self.pool._lost(
                self, [(request, charge(n, token)) for n, (token, request) in enumerate(orphans)]
            )

    @abstractmethod
    def _send(self, token: int, task: Task) -> None: ...

    @abstractmethod
    def wait_ready(self, timeout: float | None) -> None:
        """Return once the UDF is constructed; raise its constructor's error, or
        ``StartTimeout``."""

    @abstractmethod
    def stop(self, *, graceful: bool = True, early: bool = False) -> None:
        """End the actor: see ``ActorPool.teardown`` for ``graceful`` and ``early``."""


class ActorPool(ABC):
    def __init__(self, spec: UdfSpec, schema: pa.Schema, step: str) -> None:
        self.spec = spec
        self.schema = schema
        self.step = step
        self.actors: list[Actor] = []
        self._starting: set[Actor] = set()
        self._load: dict[int, int] = {}
        self._lock = threading.Lock()
        # Signalled when an actor joins the pool (a replacement for a lost one, say).
        self._joined = threading.Condition(self._lock)
        self._broken: BaseException | None = None
        self._closed = False
        self._indexes = itertools.count()
        # Shares of the GPUs, handed out lowest first and returned when an actor goes.
        self._free_shares = list(range(spec.max_actors))
        # Batches submitted and not yet finished by an actor, for abort to fail.
        self._requests: set[Request] = set()
        # How many batches an actor holds at once, sent and not yet answered.
        self.batches_per_actor = batches_in_flight(spec)
        # What becomes of a batch whose actor is lost.
        self.recovery = Recovery(spec, schema, self.where)
        # What the actors' HTTP clients report of their requests, per server, by actor index;
        # each report goes on to ``on_requests`` (the stage's event, a Ray actor's tally),
        # summed over the actors, in the order the reports came (hence under the lock).
        self.on_requests: Callable[[tuple[ServerCount, ...]], None] | None = None
        self._servers: dict[int, tuple[ServerCount, ...]] = {}
        self._servers_lock = threading.Lock()

    @property
    def where(self) -> str:
        return f"{self.spec.verb} step `{self.step}`"

    # ---- lifecycle -------------------------------------------------------------------------

    def start(self) -> None:
        """Start the minimum number of actors, side by side (each may take seconds to load a
        model); a UDF whose constructor raises fails here, and the others are stopped."""
        starts = [in_background(self._add_actor, "vane-start") for _ in range(self.spec.min_actors)]
        try:
            wait(starts)
        except BaseException:
            # An interrupt while actors load: close the pool so that each start still running
            # stops its actor as soon as it is up, instead of leaving it behind.
            self.teardown(graceful=False)
            raise
        errors = [e for e in (f.exception() for f in starts) if e is not None]
        if errors:
            self.teardown(graceful=False)
            if isinstance(errors[0], VaneError):
                raise errors[0]
            raise UDFError(
                f"{self.where}: constructing {self.spec.name} failed: "
                f"{describe_exception(errors[0])}. The constructor's exception, with its "
                "traceback, is this error's __cause__; the constructor runs once per actor, "
                "inside the worker"
            ) from errors[0]

    def _add_actor(self) -> None:
        """Start one more actor, unless the pool already has (or is starting) ``max`` actors:
        a scale-up and a replacement may race for the last share."""
        with self._lock:
            if self._closed:
                raise self._broken or RuntimeError("the actor pool is closed")
            if not self._free_shares:
                return
            index = next(self._indexes)
            gpu_share = heapq.heappop(self._free_shares)
        try:
            actor = self._start_actor(index, gpu_share)
        except BaseException:
            self._release(gpu_share)
            raise
        with self._lock:
            self._starting.add(actor)
            closed = self._closed
        try:
            if closed:  # torn down while the actor was being created
                raise self._broken or RuntimeError("the actor pool is closed")
            actor.wait_ready(self.spec.actor_start_timeout_s)
        except StartTimeout:
            actor.stop(graceful=False)
            self._release(gpu_share)
            seconds = self.spec.actor_start_timeout_s
            raise UDFError(
                f"{self.where}: constructing {self.spec.name} did not finish within "
                f"actor_start_timeout_s={seconds:g} s{actor.abandon_note}. A constructor that "
                "loads a large model may need longer: raise actor_start_timeout_s, or pass None "
                "to wait as long as it takes"
            ) from TimeoutError(f"the constructor ran for more than {seconds:g} s")
        except BaseException:
            actor.stop(graceful=False)
            self._release(gpu_share)
            raise
        finally:
            with self._lock:
                self._starting.discard(actor)
        self._join(actor)

    def _join(self, actor: Actor) -> None:
        with self._lock:
            closed = self._closed
            if not closed:
                self.actors.append(actor)
                self._load[actor.index] = 0
                self._joined.notify_all()
        if closed:  # it finished starting after teardown: nobody will use or stop it
            actor.stop(graceful=False)
            self._release(actor.gpu_share)

    def _release(self, gpu_share: int) -> None:
        with self._lock:
            if gpu_share not in self._free_shares:
                heapq.heappush(self._free_shares, gpu_share)

    @abstractmethod
    def _start_actor(self, index: int, gpu_share: int) -> Actor:
        """Create an actor and begin constructing its UDF; ``wait_ready`` waits for it."""

    def teardown(self, *, graceful: bool = True, early: bool = False) -> None:
        """Stop every actor, each after its UDF's teardown(). With ``early`` (the action needs
        no more output: a ``limit`` is met, a stream was closed), batches not started are
        dropped, an async UDF's running calls are cancelled and a plain one's running call
        finishes. ``graceful=False`` (after a failure) drops queued batches, does not wait for
        running ones and runs no teardown(). Actors that finish starting later stop
        themselves."""
        with self._lock:
            self._closed = True
            actors, starting = self.actors, list(self._starting)
            self.actors = []
            self._joined.notify_all()
        for actor in starting:  # nothing was sent to them: do not wait for their constructors
            actor.stopping = True
            actor.stop(graceful=False)
        for actor in actors:
            actor.stopping = True
            actor.stop(graceful=graceful, early=early)

    def drop_unanswered(self, error: BaseException) -> None:
        """Settle every batch not yet answered with ``error``: after an early ``teardown``,
        those the workers dropped are never answered, and a caller waiting on one (a Ray
        host's call, ``ray/actor.py``) would wait for good."""
        with self._lock:
            requests = list(self._requests)
        for request in requests:
            _resolve(request.future, error=error)

    def abort(self, error: BaseException) -> None:
        """Stop now: every unfinished batch fails with ``error``, every actor is stopped
        without waiting for it, and nothing new starts."""
        with self._lock:
            self._broken = self._broken or error
            requests = list(self._requests)
        self.teardown(graceful=False)
        for request in requests:
            _resolve(request.future, error=error)

    def fail_internal(self, thread: str, exc: BaseException) -> None:
        """One of the pool's own threads failed: stop the job with an error that says so."""
        error = ExecutionError(
            f"{self.where}: {thread} failed: {describe_exception(exc)}. This is a fault in vane, "
            "not in the function; the job was stopped. Please report it with this message"
        )
        error.__cause__ = exc
        self.abort(error)

    # ---- work --------------------------------------------------------------------------------

    @property
    def capacity(self) -> int:
        return max(1, len(self.actors)) * self.batches_per_actor

    def can_scale_up(self) -> bool:
        with self._lock:
            return bool(self._free_shares) and not self._closed

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
                load >= self.batches_per_actor for load in self._load.values()
            )

    def submit(self, task: Task) -> Future[BatchOutcome]:
        """Send the batch to the least-loaded actor; the future holds its outcome."""
        request = Request(task)
        self._requests.add(request)  # a set's add and discard are atomic: no lock
        self._dispatch(request)
        return request.future

    def _dispatch(self, request: Request) -> None:
        try:
            with self._lock:
                while True:
                    if self._broken is not None:
                        raise self._broken
                    if self._closed:
                        raise RuntimeError("the actor pool is closed")
                    alive = [a for a in self.actors if a.alive]
                    if alive:
                        break
                    self._joined.wait()  # only while a lost actor's replacement starts
                actor = min(alive, key=lambda a: self._load[a.index])
                self._load[actor.index] += 1
        except Exception as exc:
            _resolve(request.future, error=exc)
            return
        actor.submit(request)

    def _unload(self, actor: Actor) -> None:
        with self._lock:
            if actor.index in self._load:
                self._load[actor.index] -= 1

    def _finished(self, actor: Actor, request: Request, result: Result) -> None:
        self._unload(actor)
        self._requests.discard(request)  # (a stale one, cancelled or split, is harmless)
        if isinstance(result, BaseException):
            _resolve(request.future, error=result)
        else:
            _resolve(request.future, result)

    def _redispatch(self, actor: Actor, request: Request) -> None:
        self._unload(actor)
        self._dispatch(request)

    # ---- requests to servers ------------------------------------------------------------------

    def report_requests(self, index: int, servers: tuple[ServerCount, ...]) -> None:
        """Actor ``index``'s requests per server now (``vane.observe.requests``)."""
        with self._servers_lock:
            self._servers[index] = servers
            listener = self.on_requests
            if listener is not None:
                report_safely(listener, merge_servers(self._servers.values()))

    def _drop_in_flight(self, index: int) -> None:
        """A lost actor's requests are in flight no more (those it sent still count)."""
        with self._servers_lock:
            servers = self._servers.get(index)
        if servers and any(c.in_flight for c in servers):
            self.report_requests(index, tuple(replace(c, in_flight=0) for c in servers))

    # ---- losing an actor ----------------------------------------------------------------------

    def _lost(self, actor: Actor, orphans: list[tuple[Request, Loss | None]]) -> None:
        """Called from the lost actor's own thread: replace it, then see to its batches."""
        with self._lock:
            if actor in self.actors:
                self.actors.remove(actor)
            self._load.pop(actor.index, None)
            closed = self._closed
        self._release(actor.gpu_share)
        self._drop_in_flight(actor.index)
        if closed:
            return
        losses = [loss for _, loss in orphans if loss is not None]
        log.warning(
            "%s actor %d: %s; starting a replacement and sending its %d batch(es) again",
            self.spec.name,
            actor.index,
            losses[0].text if losses else "was lost",
            len(orphans),
        )
        threading.Thread(target=self._replace, name="vane-replace", daemon=True).start()
        for request, loss in orphans:
            if request.future.done():
                continue  # cancelled, or failed meanwhile
            if loss is None:
                self._dispatch(request)
            else:
                self._after_loss(request, loss, actor)

    def _replace(self) -> None:
        try:
            self._add_actor()
        except BaseException as exc:
            with self._lock:
                alone = not self.actors and not self._closed
            if alone:
                self._break(exc)
            else:
                log.warning("%s: a replacement actor failed to start: %s", self.where, exc)

    def _break(self, error: BaseException) -> None:
        """No actor can be started any more: every waiting and later batch fails with it."""
        with self._lock:
            self._broken = self._broken or error
            requests = list(self._requests)
            self._joined.notify_all()
        for request in requests:
            _resolve(request.future, error=error)

    def _after_loss(self, request: Request, loss: Loss, actor: Actor) -> None:
        """Carry out what the recovery policy decides for a batch lost with ``actor``."""
        decision = self.recovery.after_loss(request.task, request.deaths, loss, actor.abandon_note)
        match decision:
            case Retry(task, deaths):
                request.task, request.deaths = task, deaths
                self._dispatch(request)
            case Split(tasks):
                self._send_apart(request, list(tasks))
            case GiveUp(error):
                _resolve(request.future, error=error)
            case PoisonRow(outcome):
                _resolve(request.future, outcome)

    def _send_apart(self, request: Request, tasks: list[Task]) -> None:
        """Run ``tasks``, consecutive pieces of ``request``'s batch, as batches of their own;
        ``request`` gets their outcomes joined in order, or the first error among them."""
        first_row = request.task.offset
        parts = [Request(task) for task in tasks]

        def settle(_: Future[BatchOutcome]) -> None:
            if not all(part.future.done() for part in parts):
                return
            for part in parts:
                error = part.future.exception()
                if error is not None:
                    _resolve(request.future, error=error)
                    return
            joined = parts[0].future.result()
            for part in parts[1:]:
                joined = joined.then(part.future.result(), part.task.offset - first_row)
            _resolve(request.future, joined)

        for part in parts:
            part.future.add_done_callback(settle)
            self._dispatch(part)
