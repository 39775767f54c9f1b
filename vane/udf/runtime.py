"""What runs inside an actor: construct the UDF once, then run batches through it.

The same code serves every backend (a thread in the driver, a subprocess, a Ray actor): call the
user's function, retry, apply ``on_error``, and conform the output to the declared schema. It is
written as coroutines so an ``async def __call__`` can run many batches at once on the actor's
event loop; a plain function is simply called from the coroutine.
"""

from __future__ import annotations

import asyncio
import inspect
import traceback
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa

from vane.errors import UDFError
from vane.udf.batch_contract import ContractError, conform
from vane.udf.spec import UdfSpec


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


class RowFailures(Exception):
    """Raised by a UDF that answered a batch but some of its rows failed on their own:
    ``output`` holds every row (nulls where they failed), ``rows`` the failing positions and
    ``errors`` why, one per position."""

    def __init__(self, output: Any, rows: list[int], errors: list[str]) -> None:
        super().__init__(f"{len(rows)} row(s) failed; the first: {errors[0]}")
        self.output = output
        self.rows = rows
        self.errors = errors


@dataclass(frozen=True)
class Task:
    """A batch of input rows: ``offset`` is the position of its first row in the step's input."""

    seq: int
    offset: int
    table: pa.Table


def describe_exception(exc: BaseException) -> str:
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


class UdfRuntime:
    """A constructed UDF and the rules for calling it. Build it inside the worker."""

    def __init__(self, spec: UdfSpec, schema: pa.Schema, step: str) -> None:
        self.spec = spec
        self.step = step
        # The declared schema; with on_error="null" the step adds the error column itself.
        self.declared = (
            pa.schema([f for f in schema if f.name != spec.error_column])
            if spec.on_error == "null"
            else schema
        )
        self.fn = (
            spec.fn(*spec.constructor_args, **spec.constructor_kwargs) if spec.is_class else spec.fn
        )
        self._row_limit = asyncio.Semaphore(spec.max_concurrency_per_actor)

    # ---- calling the user's code ----------------------------------------------------------

    async def _call_one(self, value: Any) -> Any:
        result = self.fn(value, **self.spec.fn_kwargs)
        if inspect.isawaitable(result):
            result = await result
        return result

    async def _call_row(self, row: dict[str, Any]) -> Any:
        async with self._row_limit:
            return await self._call_one(row)

    async def call(self, table: pa.Table) -> pa.Table:
        """Run the UDF on ``table`` and conform its output; user errors propagate as they are."""
        out = await self._call_and_conform(table)
        if self.spec.passthrough and out.num_rows != table.num_rows:
            raise ContractError(
                f"{self.spec.verb} step `{self.step}` returned {out.num_rows} rows for "
                f"{table.num_rows}; a step that keeps its input columns needs one output row "
                "per input row, in order"
            )
        return out

    async def _call_and_conform(self, table: pa.Table) -> pa.Table:
        where = f"{self.spec.verb} step `{self.step}`"
        if self.spec.kind == "batch":
            return conform(await self._call_one(table), self.declared, where)
        rows = table.to_pylist()
        results = await asyncio.gather(*(self._call_row(row) for row in rows))
        if self.spec.kind == "flat":
            out_rows: list[Any] = []
            for row, result in zip(rows, results, strict=True):
                if not isinstance(result, (list, tuple)):
                    raise ContractError(
                        f"{where}: flat_map functions return a list of row dicts, got "
                        f"{type(result).__name__} for row {row!r}"
                    )
                out_rows.extend(result)
        else:
            out_rows = list(results)
        names = self.declared.names
        expected = set(names)
        for number, row in enumerate(out_rows):
            if not isinstance(row, dict):
                raise ContractError(f"{where}: rows must be dicts, got {type(row).__name__}")
            if row.keys() != expected:
                missing = sorted(expected - row.keys())
                extra = sorted(row.keys() - expected)
                raise ContractError(
                    f"{where}: output row {number} ({row!r}) does not have exactly the declared "
                    f"columns {names}: missing {missing}, extra {extra}. Return every declared "
                    "key in every row (None for a null)"
                )
        if not out_rows:
            return self.declared.empty_table()
        return conform({n: [r[n] for r in out_rows] for n in names}, self.declared, where)

    # ---- retries and on_error --------------------------------------------------------------

    async def run(self, task: Task) -> BatchOutcome:
        """The batch's output under the step's retry and ``on_error`` policy."""
        attempts = self.spec.max_retries + 1
        error: Exception | None = None
        for _ in range(attempts):
            try:
                return self._complete(await self.call(task.table))
            except ContractError:
                raise  # the output does not fit the schema: retrying cannot help
            except RowFailures as failures:
                return self._some_rows_failed(task, failures)
            except Exception as exc:
                error = exc
        assert error is not None
        if self.spec.on_error == "raise":
            raise self.failure(task, error) from error
        pieces, dropped, nulled = await self._salvage(task.table, 0, error)
        table = pa.concat_tables(pieces) if pieces else self._empty()
        return BatchOutcome(table, len(dropped), nulled, describe_exception(error), dropped)

    def _some_rows_failed(self, task: Task, failures: RowFailures) -> BatchOutcome:
        """The UDF answered the batch but some rows failed on their own (one request of many):
        ``on_error`` applies to those rows only; nothing is re-run, no neighbour is touched."""
        first = failures.errors[0]
        if self.spec.on_error == "raise":
            row = task.offset + failures.rows[0]
            raise UDFError(
                f"{self.spec.verb} step `{self.step}` failed on input row {row}"
                + (f" and {len(failures.rows) - 1} other(s)" if len(failures.rows) > 1 else "")
                + f": {first}. Pass on_error='null' to keep such rows with a null, or "
                "on_error='skip' to drop them"
            )
        where = f"{self.spec.verb} step `{self.step}`"
        table = conform(failures.output, self.declared, where)
        if table.num_rows != task.table.num_rows:
            raise ContractError(f"{where} answered {table.num_rows} rows for {task.table.num_rows}")
        if self.spec.on_error == "skip":
            keep = np.ones(table.num_rows, dtype=bool)
            keep[failures.rows] = False
            kept = self._complete(table.filter(pa.array(keep))).table
            return BatchOutcome(kept, len(failures.rows), 0, first, list(failures.rows))
        texts: list[str | None] = [None] * table.num_rows
        for row, text in zip(failures.rows, failures.errors, strict=True):
            texts[row] = text
        table = table.append_column(pa.field(self.spec.error_column, pa.string()), pa.array(texts))
        return BatchOutcome(table, 0, len(failures.rows), first)

    def failure(self, task: Task, error: BaseException) -> UDFError:
        end = task.offset + task.table.num_rows - 1
        tries = self.spec.max_retries + 1
        return UDFError(
            f"{self.spec.verb} step `{self.step}` raised on input rows {task.offset}..{end} "
            f"(after {tries} attempt{'s' * (tries != 1)}): {describe_exception(error)}. "
            "The traceback of the error is shown above. Fix the function, or pass "
            "on_error='skip' to drop failing rows or on_error='null' to keep them as nulls"
        )

    def _complete(self, table: pa.Table) -> BatchOutcome:
        if self.spec.on_error == "null":
            table = table.append_column(
                pa.field(self.spec.error_column, pa.string()), pa.nulls(table.num_rows, pa.string())
            )
        return BatchOutcome(table)

    def _empty(self) -> pa.Table:
        return self._complete(self.declared.empty_table()).table

    async def _salvage(
        self, table: pa.Table, start: int, error: Exception
    ) -> tuple[list[pa.Table], list[int], int]:
        """Bisect a failing batch down to the rows that fail; keep the output of the others.
        Failing rows are dropped ("skip": their positions, counted from ``start``, are
        returned) or become one row of nulls with the error ("null")."""
        if table.num_rows <= 1:
            if self.spec.on_error == "skip":
                return [], list(range(start, start + table.num_rows)), 0
            row: dict[str, list[str | None]] = {name: [None] for name in self.declared.names}
            row[self.spec.error_column] = [describe_exception(error)]
            full = self.declared.append(pa.field(self.spec.error_column, pa.string()))
            return [pa.table(row, schema=full)], [], 1
        middle = table.num_rows // 2
        pieces: list[pa.Table] = []
        dropped: list[int] = []
        nulled = 0
        for part, offset in (
            (table.slice(0, middle), start),
            (table.slice(middle), start + middle),
        ):
            try:
                pieces.append(self._complete(await self.call(part)).table)
            except ContractError:
                raise
            except Exception as exc:
                more, lost, n = await self._salvage(part, offset, exc)
                pieces.extend(more)
                dropped.extend(lost)
                nulled += n
        return pieces, dropped, nulled


def format_traceback(exc: BaseException) -> str:
    return "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
