"""The actor body: one constructed UDF and everything that runs around it inside an actor,
whatever hosts it. A thread actor (``thread.py``) wraps it in futures, a worker process
(``_worker.py``) in frames on pipes, and a Ray actor will wrap it in an actor method.

- The UDF is constructed on the body's own thread, which then runs every batch. A plain UDF's
  batches come from a queue, one at a time, with no event loop: its code runs on an ordinary
  thread (where it may call ``asyncio.run``), and a batch costs a queue hand-off instead of an
  event loop's cross-thread round trip (measured: 42 vs 120 microseconds). An ``async`` UDF's
  batches run on an event loop that the thread runs, up to ``max_concurrency_per_actor`` at once.
- Every batch delivers exactly one result, whatever the user's code raised: an ``Exception`` is
  the batch's error, and ``SystemExit``/``KeyboardInterrupt`` become a ``UDFError`` too (raised
  out of the thread they would end the actor and leave its batches waiting forever).
- With ``batch_timeout_s``, an async attempt is cancelled at its deadline and fails like any
  other. A plain call cannot be stopped from outside in Python: a watchdog notices the overrun,
  the body delivers nothing more and reports a ``Hang``, and the host replaces the actor (a
  process host kills its process; a thread host abandons the thread, which is a daemon). The
  watchdog also covers an async call that blocks its event loop, after a grace period.
"""

from __future__ import annotations

import contextlib
import functools
import gc
import itertools
import sys
import threading
import time
import traceback
import weakref
from collections.abc import Callable, Coroutine, Iterator
from concurrent.futures import Future, InvalidStateError
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from queue import SimpleQueue
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from vane.errors import ConfigurationError
from vane.observe.requests import Report, ServerLoad, counting
from vane.udf.runtime import BatchOutcome, Task, UdfRuntime, Watch
from vane.udf.spec import UdfSpec

if TYPE_CHECKING:
    import asyncio

Result = BatchOutcome | BaseException
Deliver = Callable[[int, Result], None]

# How long past its batch timeout an async call may keep its event loop blocked before the
# actor counts as hung (a cancelled call normally ends at once).
ASYNC_GRACE_SECONDS = 2.0

_VANE_DIR = str(Path(__file__).resolve().parents[2])
_UNWATCHED: AbstractContextManager[None] = nullcontext()


def _unwatched(attempt: int) -> AbstractContextManager[None]:
    return _UNWATCHED


def concurrent_batches(spec: UdfSpec) -> int:
    """Batches one actor runs at the same time."""
    return spec.max_concurrency_per_actor if spec.is_async else 1


def batches_in_flight(spec: UdfSpec) -> int:
    """Batches worth sending to one actor: what it runs at once, and for a plain UDF one more
    queued behind it, so it never waits for its next batch."""
    return spec.max_concurrency_per_actor if spec.is_async else 2


@dataclass(frozen=True)
class Hang:
    """An attempt that overran ``batch_timeout_s`` and could not be stopped."""

    token: int
    attempt: int
    seconds: float
    where: str  # the innermost frames of the stuck call, for the error message


def run_to_completion(coroutine: Coroutine[Any, Any, BatchOutcome]) -> BatchOutcome:
    """The result of a coroutine that never suspends, with no event loop."""
    try:
        coroutine.send(None)
    except StopIteration as done:
        result: BatchOutcome = done.value
        return result
    coroutine.close()
    raise ConfigurationError(
        "a UDF whose __call__ is a plain function returned an awaitable that waits on an event "
        "loop; declare it `async def __call__` so vane runs it on one"
    )


def settle(future: Future[None], error: BaseException | None = None) -> bool:
    """Resolve ``future`` unless it was already resolved or cancelled; whether this did it."""
    try:
        if error is None:
            future.set_result(None)
        else:
            future.set_exception(error)
    except InvalidStateError:
        return False
    return True


class ActorBody:
    """Construct the UDF on a new thread, then run the batches ``submit`` hands in; each result
    goes to ``deliver(token, outcome or error)``, on the body's thread."""

    def __init__(
        self,
        spec: UdfSpec,
        schema: pa.Schema,
        step: str,
        *,
        deliver: Deliver,
        on_hang: Callable[[Hang], None],
        name: str,
        constructing: Callable[[], AbstractContextManager[None]] = nullcontext,
        report: Report | None = None,
    ) -> None:
        """``report`` receives the requests the UDF's HTTP clients have in flight, per server,
        as they change (``vane.observe.requests``); None: they count nothing."""
        self.spec = spec
        self._load = ServerLoad(report) if report is not None else None
        self._constructing = constructing  # what surrounds the UDF's construction
        self._deliver = deliver
        self._on_hang = on_hang
        # Resolved once the UDF is constructed (or its constructor raised); a host that stops
        # waiting fails it, and a constructor that finishes later then discards the actor.
        self.ready: Future[None] = Future()
        # asyncio is imported for an async UDF only: a worker process running a plain one never
        # loads it.
        self._loop: asyncio.AbstractEventLoop | None = None
        if spec.is_async:
            import asyncio

            self._loop = asyncio.new_event_loop()
        self._queue: SimpleQueue[tuple[int, Task] | None] = SimpleQueue()
        self._tasks: dict[asyncio.Task[None], int] = {}  # an async UDF's batches, by token
        self._dropping = False  # stopped early or aborted: batches not yet done are dropped
        self._aborted = False  # stopped without grace: no result is delivered after it
        self._hung = False  # the watchdog gave up on this actor: deliver nothing more
        self._over = threading.Event()  # the thread ended, or was given up on
        self.completed = False  # the thread ended, its teardown() run (not given up on)
        self._watchdog: _Watchdog | None = None
        timeout = spec.batch_timeout_s
        if timeout is not None:
            limit = timeout + (ASYNC_GRACE_SECONDS if spec.is_async else 0.0)
            self._watchdog = _Watchdog(limit, self._overran)
        self.runtime: UdfRuntime | None = None
        self._thread = threading.Thread(
            target=self._main, args=(schema, step), name=name, daemon=True
        )
        self._thread.start()

    # ---- the body's thread --------------------------------------------------------------------

    def _main(self, schema: pa.Schema, step: str) -> None:
        try:
            self._serve(schema, step)
            self.completed = not self._hung
        finally:
            self._over.set()

    def _serve(self, schema: pa.Schema, step: str) -> None:
        if self._loop is not None:
            import asyncio

            asyncio.set_event_loop(self._loop)
        try:
            with self._constructing(), counting(self._load):
                self.runtime = UdfRuntime(self.spec, schema, step)
        except BaseException as exc:
            settle(self.ready, exc)
            self._close_loop()
            return
        if not settle(self.ready):
            self._close_loop()  # the host stopped waiting: nobody will send a batch
            self._release()
            return
        try:
            if self._loop is None:
                if self._serve_queue() and self.runtime.has_teardown:
                    import asyncio  # teardown() may be async, even on a plain UDF

                    asyncio.run(self.runtime.teardown())
            else:
                self._serve_loop(self._loop)
        finally:
            if self._watchdog is not None:
                self._watchdog.close()
            if not self._hung:
                if self._load is not None:  # the last counts, before the host's stop returns
                    self._load.flush()
                self._release()

    def _release(self) -> None:
        """Let go of the UDF instance as its actor ends, right after its teardown(): Ray Data's
        users clean up in ``__del__``, and expect it to run when the job ends, not at some
        later garbage collection. A cycle that holds the instance (an exception's traceback,
        say) is collected here, on the actor's thread."""
        runtime, self.runtime = self.runtime, None
        if runtime is None or not self.spec.is_class:
            return
        try:
            instance = weakref.ref(runtime.fn)
        except TypeError:  # a class without weak references: its last reference goes below
            return
        del runtime
        if instance() is not None:
            gc.collect()

    def _serve_queue(self) -> bool:
        """Run batches until told to stop; whether the actor ended normally."""
        while (item := self._queue.get()) is not None:
            token, task = item
            result = self._run_plain(token, task)
            if self._hung:
                return False  # its host has given up on this thread and moved on
            if self._load is not None:  # its requests' counts before its result (as below)
                self._load.flush()
            self._deliver(token, result)
        return not self._aborted

    def _run_plain(self, token: int, task: Task) -> Result:
        assert self.runtime is not None
        try:
            return run_to_completion(self.runtime.run(task, self._watch(token)))
        except Exception as exc:
            return exc
        except BaseException as exc:
            return self._failure(task, exc)

    def _serve_loop(self, loop: asyncio.AbstractEventLoop) -> None:
        import asyncio

        self._call_limit = asyncio.Semaphore(self.spec.max_concurrency_per_actor)
        try:
            loop.run_forever()
            # Stopped with or without grace, every batch has ended (the drain awaited them): the
            # UDF releases what it holds (connections, say) now, not when it is collected. Only
            # an actor given up on, whose loop may still be blocked, is left as it is.
            if not self._hung:
                assert self.runtime is not None
                loop.run_until_complete(self.runtime.teardown())
        finally:
            self._close_loop()

    def _spawn(self, token: int, task: Task) -> None:
        assert self._loop is not None
        running = self._loop.create_task(self._run_async(token, task))
        self._tasks[running] = token
        running.add_done_callback(self._tasks.pop)

    async def _run_async(self, token: int, task: Task) -> None:
        import asyncio

        assert self.runtime is not None
        result: Result
        async with self._call_limit:
            try:
                result = await self.runtime.run(task, self._watch(token))
            except Exception as exc:
                result = exc
            except asyncio.CancelledError as exc:
                if self._dropping:
                    return
                result = self._failure(task, exc)  # the function's own cancellation
            except BaseException as exc:
                result = self._failure(task, exc)
        if not self._hung:
            if self._load is not None:
                # Its requests' counts before its result: a host that reads them once the
                # last batch is answered (a Ray action's tally) must not miss the last change
                self._load.flush()
            self._deliver(token, result)

    def _failure(self, task: Task, exc: BaseException) -> BaseException:
        assert self.runtime is not None
        error = self.runtime.failure(task, exc)
        error.__cause__ = exc
        return error

    def _close_loop(self) -> None:
        if self._loop is not None and not self._loop.is_closed():
            self._loop.close()

    # ---- timeouts --------------------------------------------------------------------------

    def _watch(self, token: int) -> Watch:
        if self._watchdog is None:
            return _unwatched
        return functools.partial(self._watchdog.watch, token)

    def _overran(self, running: list[tuple[int, int]]) -> None:
        """``running``: the (token, attempt) of every attempt in flight, the first overdue. On
        a blocked event loop the batch to blame is the one whose task the loop is running."""
        self._hung = True
        token, attempt = running[0]
        if self._loop is not None:
            import asyncio

            current = asyncio.current_task(self._loop)
            blocked = self._tasks.get(current) if current is not None else None
            token, attempt = next(((t, a) for t, a in running if t == blocked), (token, attempt))
        seconds = self.spec.batch_timeout_s or 0.0
        self._on_hang(Hang(token, attempt, seconds, self._stuck_at()))
        self._over.set()  # given up on: nobody waits for this thread any more

    def _stuck_at(self) -> str:
        """Where the body's thread is now: the user's call it is in, and the innermost frame."""
        frame = sys._current_frames().get(self._thread.ident or -1)
        if frame is None:
            return "an unknown place"
        stack = traceback.extract_stack(frame)
        inside_vane = [i for i, f in enumerate(stack) if f.filename.startswith(_VANE_DIR)]
        frames = stack[inside_vane[-1] + 1 :] if inside_vane else stack  # the user's calls
        if not frames:
            return "a call inside vane"
        shown = [frames[0], frames[-1]] if len(frames) > 1 else [frames[0]]
        return " ... ".join(
            f"{Path(f.filename).name}:{f.lineno} in {f.name}" + (f" ({f.line})" if f.line else "")
            for f in shown
        )

    # ---- what hosts call ---------------------------------------------------------------------

    def submit(self, token: int, task: Task) -> None:
        if self._loop is None:
            self._queue.put((token, task))
        else:
            self._loop.call_soon_threadsafe(self._spawn, token, task)

    def stop(self, *, graceful: bool, early: bool = False) -> None:
        """With ``graceful``, finish every batch submitted, run teardown(), then end; with
        ``early`` too (the action needs no more of this actor's output), drop the batches not
        started and cancel an async UDF's running calls first. Without ``graceful``, drop the
        batches not started and end once the running call returns (which may be never: nothing
        waits for the thread, a daemon), without teardown()."""
        if not graceful or early:
            self._dropping = True
            while not self._queue.empty():
                self._queue.get_nowait()
        if not graceful:
            self._aborted = True
            settle(self.ready, RuntimeError("the actor was stopped while it started"))
            if self._watchdog is not None:
                self._watchdog.close()
        if self._loop is None:
            self._queue.put(None)
            return
        # A closed loop: the constructor failed, or the actor already ended.
        with contextlib.suppress(RuntimeError):
            self._loop.call_soon_threadsafe(self._shutdown, self._dropping)

    def _shutdown(self, cancel: bool) -> None:
        import asyncio

        assert self._loop is not None
        loop = self._loop
        if cancel:
            for task in list(self._tasks):
                task.cancel()

        async def drain() -> None:
            await asyncio.gather(*self._tasks, return_exceptions=True)
            loop.stop()

        loop.create_task(drain())

    def join(self, timeout: float | None = None) -> None:
        """Wait for the body to end (its teardown() run), or to be given up on (a call that
        overran ``batch_timeout_s``: its thread may never end)."""
        self._over.wait(timeout)


class _Watchdog:
    """Times attempts and reports the first one that overruns ``limit`` seconds."""

    def __init__(self, limit: float, on_overrun: Callable[[list[tuple[int, int]]], None]) -> None:
        self._limit = limit
        self._on_overrun = on_overrun
        self._entries: dict[int, tuple[float, int, int]] = {}  # key -> deadline, token, attempt
        self._keys = itertools.count()
        self._changed = threading.Condition()
        self._closed = False
        self._thread: threading.Thread | None = None

    @contextmanager
    def watch(self, token: int, attempt: int) -> Iterator[None]:
        key = next(self._keys)
        with self._changed:
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="vane-watchdog", daemon=True)
                self._thread.start()
            self._entries[key] = (time.monotonic() + self._limit, token, attempt)
            self._changed.notify()
        try:
            yield
        finally:
            with self._changed:
                self._entries.pop(key, None)

    def close(self) -> None:
        with self._changed:
            self._closed = True
            self._changed.notify()

    def _run(self) -> None:
        with self._changed:
            while not self._closed:
                if not self._entries:
                    self._changed.wait()
                    continue
                entries = sorted(self._entries.values())
                left = entries[0][0] - time.monotonic()
                if left > 0:
                    self._changed.wait(left)
                    continue
                self._closed = True
                running = [(token, attempt) for _, token, attempt in entries]
                break
            else:
                return
        self._on_overrun(running)
