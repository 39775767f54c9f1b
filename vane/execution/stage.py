"""A UDF stage: re-chunk the input stream to ``batch_size`` (zero-copy slices), keep the actor
pool busy with a bounded number of batches in flight (backpressure: a slow model slows the
reader, batches never pile up), and yield outputs in input order or as they finish.

When a plain function's calls are quick, its batches travel to the actors in *units* of several
(``Task.call_rows``): the function still gets ``batch_size`` rows per call, in order, but the
hand-off to its actor (a queue and a thread switch; for a worker process also a frame each way
through two more threads) is paid once per unit. The stage sizes units from what the actors
report: calls worth about ``UNIT_SECONDS`` of the function's time, at most ``MAX_UNIT_CALLS``
calls and ``MAX_UNIT_BYTES`` of input. A slow call (a model's) always travels alone, and so does
an ``async`` function's, whose calls run side by side.
"""

from __future__ import annotations

import contextlib
import time
import warnings
from collections import deque
from collections.abc import Callable, Generator, Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa

from vane._arrow import Rechunker, split_by_bytes
from vane._background import in_background
from vane._sql import duckdb_message
from vane.backend import connection
from vane.errors import BudgetExceededError, ExecutionError, UDFError, VaneError
from vane.execution.accounting import StepCounts
from vane.execution.actors import make_pool
from vane.execution.actors.base import ActorPool
from vane.execution.interrupt import Cancellation, Interrupted
from vane.observe.events import EventBus, ServerCount, ServerRequests, StageStarted
from vane.plan.rows import answers_row_for_row
from vane.udf.failures import catchable
from vane.udf.runtime import BatchOutcome, Task
from vane.udf.spec import UdfSpec

if TYPE_CHECKING:
    from vane.execution.ledger import Recorder
    from vane.execution.resume import Checkpoint

# An autoscaling pool adds an actor once every actor has been busy, with batches waiting, for
# this long.
SCALE_UP_AFTER_SECONDS = 0.5

# Units of batches (see above). On the bench's overhead workload (2 cores, 4,096-row batches of
# a function taking ~0.1 ms), a batch sent alone cost 0.12 ms on threads and 0.4 ms on a worker
# process beyond the function's own time; units of up to 8 took 20M rows from 2.12 to 1.68 s on
# threads and from 3.94 to 2.79 s on a worker process (2M rows: 0.34 to 0.30 s, 0.77 to 0.69 s;
# medians of 3, alternating). Units of 4 to 32 measured alike.
UNIT_SECONDS = 0.005
MAX_UNIT_CALLS = 8
MAX_UNIT_BYTES = 8 * 2**20


class UdfStage:
    def __init__(
        self,
        spec: UdfSpec,
        *,
        udf_schema: pa.Schema,
        schema: pa.Schema,
        step: str,
        step_id: int,
        source: pa.RecordBatchReader,
        events: EventBus,
        cancellation: Cancellation | None = None,
        warn: Callable[[str], None] | None = None,
        limit: int | None = None,
        total_rows: int | None = None,
        checkpoint: Checkpoint | None = None,
        ledger: Recorder | None = None,
    ) -> None:
        """``udf_schema`` is what the actors return; ``schema`` what the stage yields (the same,
        or for a pass-through step the input columns followed by it). ``cancellation`` stops
        the stage at once (Ctrl-C); ``warn`` reports rows that ``on_error`` handled, at the
        user's line of code; ``limit``, when the action needs at most that many rows of this
        step, ends the stage once it has them; ``total_rows`` is the rows it will read, when
        that is certain (``totals.py``). ``checkpoint`` (a resumable write's) answers each
        batch whose answer a killed run kept, and keeps each new one before handing it on; the
        actors start only for a batch it cannot answer. ``ledger`` (a write's ``errors_to``)
        is given each batch's input rows that ``on_error`` dropped or nulled, with why."""
        self.spec = spec
        self.udf_schema = udf_schema
        self.schema = schema
        self.step = step
        self.step_id = step_id
        self.source = source
        self.events = events
        self.batch_size = spec.rows_per_batch
        self.counts = StepCounts()  # what the step did so far (``accounting.py``)
        self.cancellation = cancellation or Cancellation()
        self.warn = warn or (lambda message: warnings.warn(message, UserWarning, stacklevel=3))
        self.calls_per_unit = 1  # grows once the actors say how quick a call is
        self.limit = limit
        self.total_rows = total_rows
        # The action failed elsewhere: closing the stream then aborts the pool, as a failure.
        self.abandoned = False
        # Whether the stream's next batch is already in hand (see ``in_hand``).
        self._in_hand = False
        self.checkpoint = checkpoint
        self.ledger = ledger
        # A resumable write's answers being kept, by the batch's future: what the stage calls
        # with the answer before its rows go on (see ``_keep_when_done``).
        self._keeping: dict[Future[BatchOutcome], Callable[[BatchOutcome], None]] = {}
        self._pool_started = False
        self._starting: Future[None] | None = None  # a pool start begun beside the stage
        self._over_budget: BudgetExceededError | None = None  # set once the budget is passed
        self._saved: set[Future[BatchOutcome]] = set()  # outcomes the saved work gave
        # The step's output and input rows handed on so far (a resumable write's marks), the
        # rows the kept parts of its output hold included.
        self._answered = (0, 0) if checkpoint is None else checkpoint.done[:2]

    def _chunks(self) -> Iterator[pa.Table]:
        skip = 0 if self.checkpoint is None else self.checkpoint.skip
        rechunker = Rechunker(_after(iter(self.source), skip) if skip else iter(self.source))
        # A step that answers each row with one needs only as many input rows as the `limit`
        # above it keeps: no row past them is sent (as the Ray runner limits the step's input),
        # and the stage reads exactly the total its StageStarted said.
        left = self.limit if self.limit is not None and answers_row_for_row(self.spec) else None
        try:
            while not rechunker.exhausted and left != 0:
                rows = self.batch_size * self.calls_per_unit
                batches = list(rechunker.take(rows if left is None else min(rows, left)))
                chunk = pa.Table.from_batches(batches, self.source.schema)
                if left is not None:
                    left -= chunk.num_rows
                if self.spec.batch_bytes is None:
                    yield chunk
                else:  # each a batch of its own: one call, never more than the bytes asked
                    yield from split_by_bytes(chunk, self.spec.batch_bytes)
        except (connection.Error, pa.ArrowException, OSError) as exc:
            if isinstance(exc, VaneError):
                raise
            # DuckDB's errors reach this stream as Arrow/OS errors; say whose input failed.
            raise ExecutionError(
                f"reading the input of {self.spec.verb} step `{self.step}` failed: "
                f"{duckdb_message(exc)}"
            ) from exc

    def in_hand(self) -> bool:
        """Whether the next batch of ``batches()`` is already here, so that asking for it will
        not wait for an actor: a reader that gathers batches (to run SQL on them, to hand the
        caller fewer, larger ones) takes those and never waits to fill a batch. Meaningful
        right after a batch was read."""
        return self._in_hand

    def batches(self) -> Iterator[pa.RecordBatch]:
        """The step's output. Closing the stream early (a ``limit`` met, the reader gone) ends
        the stage gracefully: batches still running are dropped unread, with whatever they
        raise, and every actor runs the UDF's teardown()."""
        try:
            if self.limit is None:
                yield from self._batches()
            else:
                yield from _first_rows(self._batches(), self.limit)
        except UDFError as exc:  # catchable as the user's own exception class too
            raise catchable(exc) from exc.__cause__

    def _batches(self) -> Generator[pa.RecordBatch, None, None]:
        self.counts.stamp(time.perf_counter())  # the step's time: from its pool's start
        pool = make_pool(self.spec, self.udf_schema, self.step)
        if self.events.listening:  # the requests its actors have in flight, per server
            pool.on_requests = self._requests
        self.cancellation.on_cancel(
            lambda: pool.abort(Interrupted(f"{self.spec.verb} step `{self.step}` was interrupted"))
        )
        # Batches in flight and their input rows, in submission order.
        inflight: dict[Future[BatchOutcome], pa.Table] = {}
        reads = self.spec.reads
        ending = "failed"
        try:
            self._start(pool)
            self.events.emit(
                StageStarted(self.step, self.step_id, len(pool.actors), self.total_rows)
            )
            self._count_kept_parts()
            saturated_since: float | None = None
            offset = 0
            for seq, (chunk, shipped, digests) in enumerate(self._inputs(reads)):
                if self._over_budget is not None:
                    break  # no more work; what is in flight is paid for: taken and kept below
                task = Task(seq, offset, shipped, call_rows=self.batch_size)
                for future, rows in self._submit(pool, task, digests):
                    inflight[future] = chunk.slice(rows.offset - offset, rows.table.num_rows)
                offset += chunk.num_rows
                # Hand on whatever is finished, so in-flight counts only real backlog.
                while inflight and self._next_is_ready(inflight):
                    yield from self._next_outputs(inflight, pool)
                while len(inflight) >= self._units_in_flight(pool):
                    if pool.can_scale_up() and pool.saturated():
                        now = time.perf_counter()
                        saturated_since = saturated_since or now
                        if now - saturated_since >= SCALE_UP_AFTER_SECONDS:
                            pool.scale_up()
                            saturated_since = None
                            continue
                    else:
                        saturated_since = None
                    yield from self._next_outputs(inflight, pool)
                # Before reading more input (which may wait on a step below), so that a batch
                # said to be in hand comes next.
                while inflight and self._next_is_ready(inflight):
                    yield from self._next_outputs(inflight, pool)
            while inflight:
                yield from self._next_outputs(inflight, pool)
            if self._over_budget is not None:
                raise self._over_budget
            ending = "done"
        except GeneratorExit:
            ending = "failed" if self.abandoned else "early"
            raise
        finally:
            for future in inflight:
                future.cancel()
            self._started()
            pool.teardown(graceful=ending != "failed", early=ending == "early")
            if ending != "failed":
                self._finish()

    def _start(self, pool: ActorPool) -> None:
        """Start the pool now; or for a resumable write that saved some work, at the first batch
        the saved work lacks (``_run``), loading beside the stage where one is surely lacking."""
        self._pool_started = self.checkpoint is None or self.checkpoint.nothing_saved()
        if self._pool_started:
            pool.start()
        elif self._lacks_some():
            self._starting = in_background(pool.start, f"vane-start-{self.step_id}")

    def _started(self) -> None:
        """A start begun beside the stage that no batch came to need: let it end, so that
        the teardown finds its actors (its error, if any, is the stage's no longer)."""
        if self._starting is not None and not self._pool_started:
            with contextlib.suppress(BaseException):
                self._starting.result()

    def _lacks_some(self) -> bool:
        """Whether the saved work surely lacks an answer this run needs: it holds fewer
        answers than the step has calls. Then the pool starts at once, beside the stage, and
        loads its model while the kept answers are read, not after them (on a rerun after a
        kill half-way, the load's whole time was added to the rerun). Otherwise it starts at
        the first batch the saved work lacks, and never if it lacks none: a rerun after a
        crash once every answer was kept pays for no model load."""
        if self.checkpoint is None or self.total_rows is None:
            return False
        calls = -(-(self.total_rows - self.checkpoint.skip) // self.batch_size)
        return self.checkpoint.answers_kept() < calls

    def _requests(self, servers: tuple[ServerCount, ...]) -> None:
        self.events.emit(ServerRequests(self.step, self.step_id, servers))

    def _inputs(
        self, reads: tuple[str, ...] | None
    ) -> Iterator[tuple[pa.Table, pa.Table, Future[list[str]] | None]]:
        """Each input chunk, what of it the function is given, and, for a resumable write, the
        future keys of its calls' batches, under which their answers are kept: their places in
        the input where the plan below gives the same rows on every run (``position_key``),
        else digests of their values (``batch_digest``). Digests are computed on a thread of
        their own, one chunk ahead of the stage (hashlib lets go of the GIL): the stage's
        thread meanwhile reads the input, hands batches on and writes the output, and the
        digest was the largest part of what resume=True added to a quick step. The first chunk
        is not held back for the next one's read, so the first rows wait on nothing."""
        shipped_of: Callable[[pa.Table], pa.Table] = (
            (lambda chunk: chunk.select(list(reads))) if reads is not None else (lambda c: c)
        )
        if self.checkpoint is None:
            for chunk in self._chunks():
                yield chunk, shipped_of(chunk), None
            return
        from vane.execution.resume import batch_digest, position_key

        identity = self.checkpoint.position
        if identity is not None:
            first = self.checkpoint.skip
            for chunk in self._chunks():
                keys: Future[list[str]] = Future()
                keys.set_result(
                    [
                        position_key(identity, first + start, min(self.batch_size, rest))
                        for start, rest in _calls(chunk.num_rows, self.batch_size)
                    ]
                )
                first += chunk.num_rows
                yield chunk, shipped_of(chunk), keys
            return

        def digests(shipped: pa.Table, call_rows: int) -> list[str]:
            return [
                batch_digest(shipped.slice(start, call_rows))
                for start, _ in _calls(shipped.num_rows, call_rows)
            ]

        ahead: deque[tuple[pa.Table, pa.Table, Future[list[str]]]] = deque()
        first_chunk = True
        with ThreadPoolExecutor(1, thread_name_prefix=f"vane-digest-{self.step_id}") as pool:
            for chunk in self._chunks():
                shipped = shipped_of(chunk)
                ahead.append((chunk, shipped, pool.submit(digests, shipped, self.batch_size)))
                if len(ahead) > 1 or first_chunk:
                    first_chunk = False
                    yield ahead.popleft()
            while ahead:
                yield ahead.popleft()

    def _submit(
        self, pool: ActorPool, task: Task, digested: Future[list[str]] | None
    ) -> list[tuple[Future[BatchOutcome], Task]]:
        """The batch's outcome, with the rows it is for: the pool's (started now if the saved
        work has answered every batch so far), or for a resumable write the saved answers of
        the calls a killed run kept and the pool's for the others, in the order of the rows."""
        if self.checkpoint is None or digested is None:
            return [(self._run(pool, task), task)]
        checkpoint = self.checkpoint
        digests = digested.result()
        saved = [] if checkpoint.none_kept else [checkpoint.get(digest) for digest in digests]
        if all(outcome is None for outcome in saved):  # (none kept: the batch as it is)
            running = self._run(pool, task)
            starts = [start for start, _ in _calls(task.table.num_rows, self.batch_size)]
            self._keeping[running] = self._keep_when_done(
                running, digests, starts, task.table.num_rows
            )
            return [(running, task)]
        calls = task.split_calls()
        runs: list[tuple[Future[BatchOutcome], Task]] = []
        start = 0
        while start < len(calls):  # each stretch of calls that were all kept, or all not
            end = start + 1
            while end < len(calls) and (saved[end] is None) == (saved[start] is None):
                end += 1
            first = calls[start].offset - task.offset
            rows = task.piece(first, sum(call.table.num_rows for call in calls[start:end]))
            answers = [outcome for outcome in saved[start:end] if outcome is not None]
            if answers:
                joined = answers[0]
                for call, outcome in zip(calls[start + 1 : end], answers[1:], strict=True):
                    joined = joined.then(outcome, call.offset - rows.offset)
                future: Future[BatchOutcome] = Future()
                future.set_result(joined)
                self._saved.add(future)
            else:
                future = self._run(pool, rows)
                starts = [call.offset - rows.offset for call in calls[start:end]]
                self._keeping[future] = self._keep_when_done(
                    future, digests[start:end], starts, rows.table.num_rows
                )
            runs.append((future, rows))
            start = end
        return runs

    def _run(self, pool: ActorPool, task: Task) -> Future[BatchOutcome]:
        if not self._pool_started:
            if self._starting is not None:
                self._starting.result()  # (a constructor's error raises here, as below)
            else:
                pool.start()
            self._pool_started = True
        return pool.submit(task)

    def _keep_when_done(
        self, future: Future[BatchOutcome], digests: list[str], starts: list[int], rows: int
    ) -> Callable[[BatchOutcome], None]:
        """What keeps the batch's answer, which the stage calls with it before the answer's
        rows go on (``_next_outputs``), so that an answer is kept before its rows can reach the
        output. An answer is kept as soon as it comes, by the thread that hands it over (an
        actor's thread, or the one reading a worker process's replies) rather than by this
        stage's thread, which meanwhile goes on digesting and submitting batches (keeping costs
        a serialization, a CRC and a write: on this thread it was a third of what resume=True
        added to a quick step), and whatever answers come before it in the order of the rows
        (a rerun after a kill pays for none that came). The stage waits for it only where the
        answer is kept (``Checkpoint.keeps``, which both threads ask): where the output is kept
        in parts, a quick call's is not, and waiting on the other thread for each unit of a
        quick step (two hand-overs of the GIL) cost more than its decision."""
        checkpoint = self.checkpoint
        assert checkpoint is not None
        kept: Future[None] = Future()

        def keep(done: Future[BatchOutcome]) -> None:
            try:
                if not done.cancelled() and done.exception() is None:
                    checkpoint.put(digests, starts, done.result(), rows)
                kept.set_result(None)
            except BaseException as exc:  # (the stage raises it, with its cause)
                kept.set_exception(exc)

        future.add_done_callback(keep)
        calls = len(digests)
        return lambda outcome: kept.result() if checkpoint.keeps(outcome, calls) else None

    def _next_is_ready(self, inflight: dict[Future[BatchOutcome], pa.Table]) -> bool:
        if self.spec.preserve_order:
            return next(iter(inflight)).done()
        return any(f.done() for f in inflight)

    def _next_outputs(
        self, inflight: dict[Future[BatchOutcome], pa.Table], pool: ActorPool
    ) -> Iterator[pa.RecordBatch]:
        if self.spec.preserve_order:
            future = next(iter(inflight))
        else:
            done, _ = wait(inflight, return_when=FIRST_COMPLETED)
            future = next(f for f in inflight if f in done)
        chunk = inflight.pop(future)
        rows_in = chunk.num_rows
        keep = self._keeping.pop(future, None)
        outcome = future.result()  # a UDF error raises here, with its cause
        if keep is not None:
            keep(outcome)  # kept before its rows go on
        if self.ledger is not None and outcome.errors:
            self.ledger(chunk, outcome.errors)
        resumed = rows_in if future in self._saved else 0
        if future in self._saved:
            self._saved.discard(future)  # (a saved answer took no time: it sizes no unit)
        else:
            self._size_units(outcome, chunk)
        batch_counts = StepCounts.of_batch(rows_in, outcome, resumed=resumed)
        self.counts.add(batch_counts)
        budget = self.spec.budget
        if budget is not None and self._over_budget is None and budget.exceeded(self.counts.usage):
            # The job stops sending work; the batches in flight finish (their requests are
            # paid for), are kept by a resumable write, and then the stage fails with this.
            self._over_budget = self.counts.over_budget(
                self.spec, self.step, budget, kept=self.checkpoint is not None
            )
        self.events.emit(
            batch_counts.progress(
                self.step, self.step_id, busy=pool.busy_actors(), actors=len(pool.actors)
            )
        )
        table = self._carry(chunk, outcome) if self.spec.passthrough else outcome.table
        if self.checkpoint is not None and outcome.failure is None:
            # (a unit that failed part-way is no place to cut the output: its error follows)
            self._answered = (self._answered[0] + table.num_rows, self._answered[1] + rows_in)
            counts = self.counts  # (the kept parts' counts included: ``_count_kept_parts``)
            self.checkpoint.mark(*self._answered, counts.skipped, counts.nulled)
        batches = [batch for batch in table.to_batches() if batch.num_rows]
        for i, batch in enumerate(batches):
            # The rest of this unit's answers are here; after them, the next finished unit.
            self._in_hand = i + 1 < len(batches) or (
                bool(inflight) and self._next_is_ready(inflight)
            )
            yield batch
        if outcome.failure is not None:  # a unit's call failed after the answers above
            raise outcome.failure

    def _count_kept_parts(self) -> None:
        """The input rows whose answers are in a resumable write's kept parts, as resumed, with
        what on_error did to them."""
        done = None if self.checkpoint is None else self.checkpoint.done
        if done is not None and done.input:
            kept = StepCounts(
                rows_in=done.input,
                rows_out=done.output,
                resumed=done.input,
                skipped=done.skipped,
                nulled=done.nulled,
            )
            self.counts.add(kept)
            self.events.emit(kept.progress(self.step, self.step_id, busy=0, actors=0))

    def _units_in_flight(self, pool: ActorPool) -> int:
        """The pool's capacity counts batches sent one by one; units of several count as
        their batches, down to two per actor (one running, one waiting behind it)."""
        per_actor = max(2, pool.batches_per_actor // self.calls_per_unit)
        return min(pool.capacity, per_actor * max(1, len(pool.actors)))

    def _size_units(self, outcome: BatchOutcome, chunk: pa.Table) -> None:
        """Size the next units from the last one: its calls' time and its input's bytes. (A
        resumable write keeps a unit's answers call by call: ``BatchOutcome.calls_of``.)"""
        if self.spec.is_async or outcome.calls < 1 or not chunk.num_rows:
            return
        if self.spec.batch_bytes is not None:
            return  # a unit of several calls would hold more than batch_bytes at once
        per_call = outcome.seconds / outcome.calls
        by_time = int(UNIT_SECONDS / per_call) if per_call > 0 else MAX_UNIT_CALLS
        by_bytes = int(MAX_UNIT_BYTES * outcome.calls / max(chunk.nbytes, 1))
        self.calls_per_unit = max(1, min(MAX_UNIT_CALLS, by_time, by_bytes))

    def _carry(self, chunk: pa.Table, outcome: BatchOutcome) -> pa.Table:
        """The input columns (less the rows on_error='skip' dropped) joined by position with
        the UDF's columns: no copy of either side."""
        if outcome.failure is not None:  # the rows before the failing call's
            chunk = chunk.slice(0, outcome.table.num_rows + len(outcome.dropped))
        if outcome.dropped:
            keep = np.ones(chunk.num_rows, dtype=bool)
            keep[outcome.dropped] = False
            chunk = chunk.filter(pa.array(keep))
        return pa.Table.from_arrays(chunk.columns + outcome.table.columns, schema=self.schema)

    def _finish(self) -> None:
        self.counts.stamp(time.perf_counter())
        self.events.emit(self.counts.finished(self.step, self.step_id))
        message = self.counts.warning(self.spec, self.step)
        if message:
            self.warn(message)


def _first_rows(batches: Generator[pa.RecordBatch, None, None], n: int) -> Iterator[pa.RecordBatch]:
    """The first ``n`` rows of ``batches``, which is closed as soon as they are in hand: batches
    past them are never asked for, so neither their rows nor their errors reach the action
    (a reader such as DuckDB's asks for more than a ``limit`` above it keeps)."""
    try:
        if n <= 0:
            return  # nothing is needed: the stage never starts
        for batch in batches:
            if batch.num_rows >= n:
                batches.close()  # the stage ends (teardown) before its last rows go on
                yield batch.slice(0, n)
                return
            n -= batch.num_rows
            yield batch
    finally:
        batches.close()


def _after(batches: Iterator[pa.RecordBatch], skip: int) -> Iterator[pa.RecordBatch]:
    """``batches`` from row ``skip`` on (the rows before it read, and dropped)."""
    for batch in batches:
        if skip >= batch.num_rows:
            skip -= batch.num_rows
            continue
        yield batch.slice(skip) if skip else batch
        skip = 0


def _calls(rows: int, call_rows: int) -> list[tuple[int, int]]:
    """Where each call of a chunk of ``rows`` rows begins, with the rows from there to the
    chunk's end: as ``Task.split_calls`` cuts it (an empty chunk is one call)."""
    return [(start, rows - start) for start in range(0, max(rows, 1), call_rows)]
