"""What runs inside an actor for each batch: call the user's function, retry, apply ``on_error``,
and conform the output to the declared schema. The same code serves every backend (a thread in
the driver, a subprocess, a Ray actor); ``vane.execution.actors.body`` hosts it.

The methods are coroutines so that an ``async def __call__`` runs many batches at once on the
actor's event loop. For a plain function nothing here ever suspends, so the actor drives the
coroutine to its end without any event loop: the user's code then runs on a plain thread, where
it may call ``asyncio.run`` itself.
"""

from __future__ import annotations

import inspect
import itertools
import logging
import time
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from vane._text import counted
from vane.errors import ServerError, UDFError
from vane.observe.events import add_counts
from vane.udf.batch_contract import ContractError, conform, shorten
from vane.udf.batch_format import python_rows, to_format
from vane.udf.failures import describe_exception
from vane.udf.spec import UdfSpec

if TYPE_CHECKING:
    import asyncio

# What the actor body wraps each attempt in (attempt number -> context): its batch timeout.
Watch = Callable[[int], AbstractContextManager[None]]


@dataclass(frozen=True)
class RowError:
    """One input row that ``on_error`` dropped or nulled: its position in the batch, its error
    text as ``describe_exception`` gives it, and the calls of the function it was in."""

    row: int
    error: str
    attempts: int

    def shifted(self, rows: int) -> RowError:
        return RowError(self.row + rows, self.error, self.attempts)


@dataclass
class BatchOutcome:
    """One batch's output and what ``on_error`` did to it."""

    table: pa.Table
    rows_skipped: int = 0
    rows_nulled: int = 0
    first_error: str | None = None
    # Positions (within the batch) of the input rows that on_error="skip" dropped: a
    # pass-through step drops the same rows from the columns it carries.
    dropped: list[int] = field(default_factory=list)
    # Rows that killed or hung their actor, one line each ("input row 42: ..."), for the report.
    poisoned: list[str] = field(default_factory=list)
    # What the UDF counted while this batch ran (``usage_counters``): requests, tokens, ...
    usage: dict[str, int] = field(default_factory=dict)
    # Seconds the actor spent on the batch's calls (retries and on_error included), and how
    # many calls the batch held: the stage sizes its transport units from these.
    seconds: float = 0.0
    calls: int = 1
    # A unit whose call raised under on_error="raise" after others had answered: the outcome
    # holds the answers before it, to be handed on first, and this error, to raise next (a
    # `limit` met by those answers never sees it).
    failure: BaseException | None = None
    # Each row on_error handled, for an error ledger (``write_*(errors_to=...)``): its position
    # within the batch, its error ("Type: message") and how many calls it was in.
    errors: list[RowError] = field(default_factory=list)
    # Where the outcomes this one was joined from begin (``then``), each as a Segment; empty for
    # an outcome of one piece. A unit's calls start where pieces do, so a resumable write can
    # cut a unit's outcome back into its calls' (``calls_of``) and keep each on its own.
    segments: list[Segment] = field(default_factory=list)

    def then(self, other: BatchOutcome, rows: int) -> BatchOutcome:
        """This outcome followed by ``other``, whose input starts ``rows`` rows later."""
        if self.failure is not None:
            return self  # nothing after the failure is handed on
        here = Segment(rows, self.table.num_rows, self.rows_skipped, self.rows_nulled)
        segments = [*self.pieces(), *(here.plus(s) for s in other.pieces())]
        return BatchOutcome(
            pa.concat_tables([self.table, other.table]),
            self.rows_skipped + other.rows_skipped,
            self.rows_nulled + other.rows_nulled,
            self.first_error or other.first_error,
            self.dropped + [rows + i for i in other.dropped],
            self.poisoned + other.poisoned,
            add_counts(self.usage, other.usage),
            self.seconds + other.seconds,
            self.calls + other.calls,
            other.failure,
            self.errors + [error.shifted(rows) for error in other.errors],
            segments,
        )

    def pieces(self) -> list[Segment]:
        """Where each piece this outcome was joined from begins (itself alone: one)."""
        return self.segments or [Segment(0, 0, 0, 0)]

    def calls_of(self, starts: list[int], rows: int) -> list[BatchOutcome] | None:
        """This outcome, of ``rows`` input rows, cut at the input positions ``starts`` (the
        first row of each call of a unit, 0 first) into one outcome per call, as if each call
        had been sent alone; None where a call does not begin where a piece of it does."""
        pieces = {segment.input_row: segment for segment in self.pieces()}
        if any(start not in pieces for start in starts):
            return None
        ends = Segment(rows, self.table.num_rows, self.rows_skipped, self.rows_nulled)
        bounds = [pieces[start] for start in starts] + [ends]
        calls = []
        for first, after in itertools.pairwise(bounds):
            lo, hi = first.input_row, after.input_row
            errors = [e.shifted(-lo) for e in self.errors if lo <= e.row < hi]
            calls.append(
                BatchOutcome(
                    self.table.slice(first.output_row, after.output_row - first.output_row),
                    after.rows_skipped - first.rows_skipped,
                    after.rows_nulled - first.rows_nulled,
                    errors[0].error if errors else None,
                    [i - lo for i in self.dropped if lo <= i < hi],
                    errors=errors,
                )
            )
        # What names no row of its own (lines about rows that killed an actor, an error with
        # no row) goes with the first call: a unit's calls are kept, and found again, together.
        calls[0].poisoned = list(self.poisoned)
        if calls[0].first_error is None and not any(c.first_error for c in calls[1:]):
            calls[0].first_error = self.first_error
        return calls


@dataclass(frozen=True)
class Segment:
    """Where one piece of a joined outcome begins: its first input row, its first output row,
    and the rows skipped and nulled before it."""

    input_row: int
    output_row: int
    rows_skipped: int
    rows_nulled: int

    def plus(self, other: Segment) -> Segment:
        return Segment(
            self.input_row + other.input_row,
            self.output_row + other.output_row,
            self.rows_skipped + other.rows_skipped,
            self.rows_nulled + other.rows_nulled,
        )


def usage_counters(udf: Any) -> dict[str, int] | None:
    """A UDF object's counters so far, if it keeps any: ``usage_counters()`` returning a
    mapping of names to running totals (vane's AI functions report requests, tokens, retries,
    cache hits and failures this way; a user's class may too)."""
    counters = getattr(udf, "usage_counters", None)
    if not callable(counters):
        return None
    values = counters()
    return None if values is None else {str(k): int(v) for k, v in dict(values).items()}


class Yielded(list[Any]):
    """What a generator UDF yielded for one input (a batch's output batches, a row's rows)."""


class RowFailures(Exception):
    """Raised by a UDF that answered a batch but some of its rows failed on their own:
    ``output`` holds every row (nulls where they failed), ``rows`` the failing positions and
    ``errors`` why, one per position."""

    def __init__(self, output: Any, rows: list[int], errors: list[str]) -> None:
        super().__init__(f"{counted(len(rows), 'row')} failed; the first: {errors[0]}")
        self.output = output
        self.rows = rows
        self.errors = errors


@dataclass(frozen=True)
class Task:
    """A batch of input rows: ``offset`` is the position of its first row in the step's input,
    or, when ``batch_rows`` is set, in a batch of that many rows whose place in the input the
    host does not know (a Ray actor is given a batch, not its place); messages then say "rows
    2..3 of a batch of 5". ``attempts_done`` counts attempts already spent on it by an actor
    that hung.

    With ``call_rows`` set, the table may hold several of the function's batches, one after
    the other: the actor calls the function on each ``call_rows`` rows in turn, exactly as if
    they had been sent one by one (a *unit* of batches, which crosses to the actor at the cost
    of one)."""

    seq: int
    offset: int
    table: pa.Table
    attempts_done: int = 0
    batch_rows: int | None = None
    call_rows: int | None = None

    @property
    def calls(self) -> int:
        """How many calls of the function the batch holds."""
        rows: int = self.table.num_rows
        if self.call_rows is None or rows <= self.call_rows:
            return 1
        return -(-rows // self.call_rows)

    def split_calls(self) -> list[Task]:
        """A unit of several calls as one task per call; a single call as itself."""
        if self.calls == 1:
            return [self]
        assert self.call_rows is not None
        step = self.call_rows
        return [
            self.piece(start, step, self.attempts_done)
            for start in range(0, self.table.num_rows, step)
        ]

    @property
    def rows(self) -> str:
        return f"{self.offset}..{self.offset + self.table.num_rows - 1}{self._of}"

    def row(self, position: int) -> str:
        """How a message names the batch's row at ``position``."""
        return f"{self.offset + position}{self._of}"

    @property
    def _of(self) -> str:
        return "" if self.batch_rows is None else f" of a batch of {self.batch_rows}"

    def halves(self, attempts_done: int) -> tuple[Task, Task]:
        """The batch cut in two, each half a batch of its own with ``attempts_done`` spent: the
        one bisection of a failing batch, down to the rows that fail. It runs where the
        failure is seen: in the actor when the function raises (``UdfRuntime._salvage``, the
        halves in turn), in the pool when an actor is lost with the batch (``Recovery`` in
        ``vane.execution.actors.recovery`` decides, ``ActorPool`` runs the halves on any
        actors); a single row left failing becomes ``failed_rows`` in both."""
        middle = self.table.num_rows // 2
        return self.piece(0, middle, attempts_done), self.piece(middle, attempts_done=attempts_done)

    def piece(self, start: int, rows: int | None = None, attempts_done: int = 0) -> Task:
        """Rows ``start`` .. ``start + rows`` of this batch (to its end when ``rows`` is None),
        named as the rows they are in the step's input."""
        return Task(
            self.seq,
            self.offset + start,
            self.table.slice(start, rows),
            attempts_done,
            self.batch_rows,
            self.call_rows,
        )


class RowCountError(ContractError):
    """A pass-through step's function returned a different number of rows than it was given:
    a fault of the step's shape, never of one row, so ``on_error`` does not apply to it."""


def failed_rows(
    spec: UdfSpec,
    schema: pa.Schema,
    inputs: pa.Table,
    error: str,
    poisoned: Sequence[str] = (),
    *,
    attempts: int = 1,
) -> BatchOutcome:
    """The failing input rows ``inputs`` under ``on_error="skip"`` (dropped) or ``"null"`` (one
    row each, with the error text); ``schema`` is the step's output, error column included.
    Under "null" every column the function returns is null, even one named like an input
    column: a value there would pass the input off as the function's answer. (Columns a step
    carries past the function, a column UDF's input columns, are untouched.)"""
    rows = inputs.num_rows
    errors = [RowError(row, error, attempts) for row in range(rows)]
    if spec.on_error == "skip":
        return BatchOutcome(
            schema.empty_table(),
            rows,
            0,
            error,
            list(range(rows)),
            list(poisoned),
            errors=errors,
        )
    columns = [
        pa.array([error] * rows, pa.string())
        if f.name == spec.error_column
        else pa.nulls(rows, f.type)
        for f in schema
    ]
    return BatchOutcome(
        pa.Table.from_arrays(columns, schema=schema),
        0,
        rows,
        error,
        [],
        list(poisoned),
        errors=errors,
    )


def _first_keys(rows: list[Any]) -> list[str]:
    """The keys of the first row dict (the columns a row function without a schema returns)."""
    first = rows[0] if rows else {}
    return list(first) if isinstance(first, dict) else []


class UdfRuntime:
    """A constructed UDF and the rules for calling it. Build it inside the actor."""

    def __init__(self, spec: UdfSpec, schema: pa.Schema | None, step: str) -> None:
        """``schema`` None: the step is learning its schema from this output, which is kept in
        the types it comes in (only a probe of the first batch runs so)."""
        self.spec = spec
        self.step = step
        self.schema = schema
        # The declared schema; with on_error="null" the step adds the error column itself.
        self.declared = (
            pa.schema([f for f in schema if f.name != spec.error_column])
            if spec.on_error == "null" and schema is not None
            else schema
        )
        self.is_async = spec.is_async
        self.timeout = spec.batch_timeout_s
        self.fn = (
            spec.fn(*spec.constructor_args, **spec.constructor_kwargs) if spec.is_class else spec.fn
        )
        # asyncio is imported for an async function only: a worker process running a plain one
        # never loads it (20-50 ms of its start).
        self._row_limit: asyncio.Semaphore | None = None
        if self.is_async:
            import asyncio

            self._row_limit = asyncio.Semaphore(spec.max_concurrency_per_actor)
        self._where = f"{spec.verb} step `{step}`"
        # The counters as last reported with a batch's outcome.
        self._reported: dict[str, int] = {}
        # Calls answered so far: a failure before any says so instead of suggesting on_error.
        self._answered = 0

    def _usage_since_last(self) -> dict[str, int]:
        """What the UDF counted since the last batch reported: batches that overlap share it
        out between them, and their sum is the UDF's total."""
        now = usage_counters(self.fn) if self.spec.is_class else None
        if not now:
            return {}
        delta = {k: v - self._reported.get(k, 0) for k, v in now.items()}
        self._reported = now
        return {k: v for k, v in delta.items() if v}

    @property
    def has_teardown(self) -> bool:
        """Whether the UDF instance has a ``teardown()`` to call when its actor ends."""
        return self.spec.is_class and callable(getattr(self.fn, "teardown", None))

    async def teardown(self) -> None:
        """The UDF instance's ``teardown()`` (plain or ``async``), if it has one: called once,
        after the actor's last batch, when the actor ends normally (as Beam's
        ``DoFn.Teardown``). Its error is logged, not raised: every batch is already answered."""
        hook = getattr(self.fn, "teardown", None) if self.spec.is_class else None
        if not callable(hook):
            return
        try:
            result = hook()
            if inspect.isawaitable(result):
                await result
        except Exception as exc:
            logging.getLogger("vane").warning(
                "%s: teardown() raised %s", self._where, describe_exception(exc)
            )

    # ---- calling the user's code ----------------------------------------------------------

    async def _call_one(self, value: Any) -> Any:
        """The function's answer for ``value``; a generator's yields, collected in a list
        marked ``Yielded``."""
        result = self.fn(value, *self.spec.fn_args, **self.spec.fn_kwargs)
        if inspect.isawaitable(result):
            result = await result
        elif inspect.isgenerator(result):
            result = Yielded(result)
        elif inspect.isasyncgen(result):
            result = Yielded([item async for item in result])
        return result

    async def _call_row(self, row: dict[str, Any]) -> Any:
        assert self._row_limit is not None
        async with self._row_limit:
            return await self._call_one(row)

    async def call(self, table: pa.Table) -> pa.Table:
        """Run the UDF on ``table`` and conform its output; user errors propagate as they are."""
        out = await self._call_and_conform(table)
        if self.spec.passthrough and out.num_rows != table.num_rows:
            raise RowCountError(
                f"{self._where} returned {counted(out.num_rows, 'row')} for {table.num_rows}; "
                "a step that keeps its input columns needs one output row per input row, in order"
            )
        return out

    async def _call_and_conform(self, table: pa.Table) -> pa.Table:
        if self.spec.kind == "batch":
            result = await self._call_one(to_format(table, self.spec.batch_format, self._where))
            if not isinstance(result, Yielded):
                return conform(result, self.declared, self._where)
            pieces = [conform(piece, self.declared, self._where) for piece in result]
            if pieces:
                return pa.concat_tables(pieces)
            return self._empty()
        rows = python_rows(table, self._where)
        if self.is_async:
            import asyncio

            results = await asyncio.gather(*(self._call_row(row) for row in rows))
        else:  # a plain row function: called in turn, with no event loop involved
            results = [await self._call_one(row) for row in rows]
        if self.spec.kind == "flat":
            out_rows: list[Any] = []
            for row, result in zip(rows, results, strict=True):
                if not isinstance(result, (list, tuple)):
                    raise ContractError(
                        f"{self._where}: flat_map functions return a list of row dicts (or "
                        f"yield them), got {type(result).__name__} for row {shorten(row)}"
                    )
                out_rows.extend(result)
        else:
            for row, result in zip(rows, results, strict=True):
                if isinstance(result, Yielded):
                    raise ContractError(
                        f"{self._where}: a map function returns one row dict per row, and "
                        f"this one yields rows (for row {shorten(row)}). Use flat_map for a "
                        "function that yields any number of rows"
                    )
            out_rows = list(results)
        names = self.declared.names if self.declared is not None else list(_first_keys(out_rows))
        expected = set(names)
        for number, row in enumerate(out_rows):
            if not isinstance(row, dict):
                raise ContractError(f"{self._where}: rows must be dicts, got {type(row).__name__}")
            if row.keys() != expected:
                missing = sorted(expected - row.keys())
                extra = sorted(row.keys() - expected)
                raise ContractError(
                    f"{self._where}: output row {number} ({row!r}) does not have exactly the "
                    f"declared columns {names}: missing {missing}, extra {extra}. Return every "
                    "declared key in every row (None for a null)"
                )
        if not out_rows:
            return self._empty()
        return conform({n: [r[n] for r in out_rows] for n in names}, self.declared, self._where)

    async def _attempt(self, table: pa.Table, number: int, watch: Watch) -> BatchOutcome:
        """One attempt at ``table``, under the batch timeout: an async call is cancelled when it
        runs out of time; a plain one is watched by the actor body, which cannot stop it."""
        with watch(number):
            if self.is_async and self.timeout is not None:
                return self._complete(await self._call_within(table, self.timeout))
            return self._complete(await self.call(table))

    async def _call_within(self, table: pa.Table, seconds: float) -> pa.Table:
        # Cancels the running task itself (as asyncio.timeout does on 3.11) rather than wrap
        # the call in a task of its own: the actor body then knows which batch a blocked event
        # loop is running.
        import asyncio

        task = asyncio.current_task()
        assert task is not None
        expired = False

        def expire() -> None:
            nonlocal expired
            expired = True
            task.cancel()

        timer = asyncio.get_running_loop().call_later(seconds, expire)
        try:
            return await self.call(table)
        except asyncio.CancelledError:
            if not expired:
                raise
            if hasattr(task, "uncancel"):  # Python 3.11+
                task.uncancel()
            raise TimeoutError(
                f"the call did not finish within batch_timeout_s={seconds:g} s"
            ) from None
        finally:
            timer.cancel()

    # ---- retries and on_error --------------------------------------------------------------

    async def run(self, task: Task, watch: Watch) -> BatchOutcome:
        """The batch's output under the step's retry and ``on_error`` policy, with what the
        UDF counted meanwhile (``usage_counters``). A unit of several calls (``Task.call_rows``)
        runs them in turn, each under the policy on its own; the first call that raises under
        ``on_error="raise"`` ends the unit, with its own rows in the message: it fails the unit
        if it was the first, else it is the ``failure`` that follows the answers before it."""
        started = time.perf_counter()
        calls = task.split_calls()
        outcome: BatchOutcome | None = None
        for call in calls:
            try:
                done = await self._run(call, watch)
            except Exception as exc:
                if outcome is None:
                    raise
                outcome.failure = exc
                break
            outcome = done if outcome is None else outcome.then(done, call.offset - task.offset)
        assert outcome is not None
        # (a failed batch's counts go with the next one)
        outcome.usage = add_counts(outcome.usage, self._usage_since_last())
        outcome.seconds = time.perf_counter() - started
        outcome.calls = len(calls)
        return outcome

    async def _run(self, task: Task, watch: Watch) -> BatchOutcome:
        """The batch's output under the step's retry and ``on_error`` policy. Under "skip" and
        "null" an output that does not fit the schema is one more failure; under "raise" it is
        reported as it is, since retrying cannot change it."""
        last = self.spec.max_retries
        error: Exception | None = None
        tries = 0  # the calls the batch was in (with those an actor that hung spent)
        for number in range(min(task.attempts_done, last), last + 1):
            tries = number + 1
            try:
                return await self._attempt(task.table, number, watch)
            except RowFailures as failures:  # answered, with some rows failed on their own
                return self._some_rows_failed(task, failures, tries)
            except (RowCountError, ServerError):  # no row is to blame: nothing to salvage
                raise
            except ContractError as exc:
                if self.spec.passthrough and exc.row is not None:
                    # one output row per input row: say which input row it was
                    exc = ContractError(
                        f"{exc} (row {exc.row} answers input row {task.row(exc.row)})"
                    )
                if self.spec.on_error == "raise":
                    raise exc from None
                error = exc
                break
            except Exception as exc:
                error = exc
        assert error is not None
        if self.spec.on_error == "raise":
            raise self.failure(task, error) from error
        return await self._salvage(task, error, last, watch, tries)

    def _some_rows_failed(self, task: Task, failures: RowFailures, tries: int) -> BatchOutcome:
        """The UDF answered the batch but some rows failed on their own (one request of many):
        ``on_error`` applies to those rows only; nothing is re-run, no neighbour is touched."""
        first = failures.errors[0]
        if self.spec.on_error == "raise":
            raise UDFError(
                f"{self.spec.verb} step `{self.step}` failed on input row "
                f"{task.row(failures.rows[0])}"
                + (f" and {len(failures.rows) - 1} other(s)" if len(failures.rows) > 1 else "")
                + f": {first}. Pass on_error='null' to keep such rows with a null, or "
                "on_error='skip' to drop them"
            )
        where = f"{self.spec.verb} step `{self.step}`"
        table = conform(failures.output, self.declared, where)
        if table.num_rows != task.table.num_rows:
            raise ContractError(
                f"{where} answered {counted(table.num_rows, 'row')} for {task.table.num_rows}"
            )
        errors = [
            RowError(row, text, tries)
            for row, text in zip(failures.rows, failures.errors, strict=True)
        ]
        if self.spec.on_error == "skip":
            keep = np.ones(table.num_rows, dtype=bool)
            keep[failures.rows] = False
            kept = self._complete(table.filter(pa.array(keep))).table
            return BatchOutcome(
                kept, len(failures.rows), 0, first, list(failures.rows), errors=errors
            )
        texts: list[str | None] = [None] * table.num_rows
        for row, text in zip(failures.rows, failures.errors, strict=True):
            texts[row] = text
        table = table.append_column(pa.field(self.spec.error_column, pa.string()), pa.array(texts))
        return BatchOutcome(table, 0, len(failures.rows), first, errors=errors)

    def _empty(self) -> pa.Table:
        return pa.table({}) if self.declared is None else self.declared.empty_table()

    def failure(self, task: Task, error: BaseException) -> UDFError:
        tries = self.spec.max_retries + 1
        if self._answered:
            fix = (
                "Fix the function, or pass on_error='skip' to drop failing rows or "
                "on_error='null' to keep them as nulls"
            )
        else:  # nothing has worked yet: most likely a fault of the code, not of some rows
            fix = (
                "Fix the function: no batch has succeeded yet, so skipping failing rows "
                "(on_error='skip') would likely drop them all"
            )
        return UDFError(
            f"{self._where} raised on input rows {task.rows} (after {tries} "
            f"attempt{'s' * (tries != 1)}): {describe_exception(error)}. The function's own "
            f"exception, with its traceback, is this error's __cause__. {fix}"
        )

    def _complete(self, table: pa.Table) -> BatchOutcome:
        self._answered += 1
        if self.spec.on_error == "null":
            table = table.append_column(
                pa.field(self.spec.error_column, pa.string()), pa.nulls(table.num_rows, pa.string())
            )
        return BatchOutcome(table)

    async def _salvage(
        self, task: Task, error: Exception, number: int, watch: Watch, tries: int
    ) -> BatchOutcome:
        """Bisect a failing batch down to the rows that fail (``Task.halves``); keep the output
        of the others. ``tries``: the calls the rows of ``task`` were in so far (each half is
        one more)."""
        if task.table.num_rows <= 1:
            text = describe_exception(error)
            return failed_rows(self.spec, self.schema, task.table, text, attempts=tries)
        outcome: BatchOutcome | None = None
        for half in task.halves(task.attempts_done):
            try:
                piece = await self._attempt(half.table, number, watch)
            except RowFailures as failures:  # answered: only its own failed rows need on_error
                piece = self._some_rows_failed(half, failures, tries + 1)
            except (RowCountError, ServerError):  # no row is to blame: nothing to salvage
                raise
            except Exception as exc:
                piece = await self._salvage(half, exc, number, watch, tries + 1)
            outcome = piece if outcome is None else outcome.then(piece, half.offset - task.offset)
        assert outcome is not None
        return outcome
