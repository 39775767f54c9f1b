"""What runs a lifted step's column UDF calls inside an actor.

To the executor a lifted step is an ordinary batch UDF: ``ColumnCalls`` is constructed once per
actor (building the user's ``@vane.cls`` object there, once, if the calls are its methods) and
called on batches holding the argument columns; it returns one column per call. Row functions
get Python values row by row; batch functions get one ``pa.Array`` per column argument; an
``async`` function runs up to ``max_concurrency`` rows at once on the actor's event loop.
"""

from __future__ import annotations

import dataclasses
import inspect
import itertools
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from vane._arguments import CallArgument, Const
from vane._text import counted
from vane.types.files import File, is_file_type
from vane.udf.batch_contract import ContractError, Subject, to_column
from vane.udf.batch_format import python_values
from vane.udf.column import ClassInstance, ColumnUdf
from vane.udf.runtime import RowFailures

# Rows in flight per actor for an async function that does not say (``max_concurrency``).
DEFAULT_ASYNC_ROWS = 64


@dataclass
class RowResults:
    """A batch call's answer row by row: ``values`` (a list, or an Arrow array of the call's
    type), and for each row that failed on its own (one request of many, say) its ``errors``
    entry, None where the row succeeded. Returned instead of raising, so one failure never
    fails, nulls or re-runs its neighbours."""

    values: list[Any] | pa.Array
    errors: list[str | None]

    def __len__(self) -> int:
        return len(self.values)


@dataclass(frozen=True)
class CallPlan:
    """One UDF call of a lifted step: which batch columns hold its argument expressions'
    values, how they map onto the function's parameters, and the column it fills."""

    udf: ColumnUdf
    columns: tuple[str, ...]
    layout: tuple[CallArgument, ...]
    output: str
    shown: str = ""  # the call as the user wrote it, for messages: "score(text, (id + 1))"

    @property
    def output_type(self) -> pa.DataType:
        """A generator's values arrive as one list per row (unnested above the step)."""
        kind = self.udf.return_type
        return pa.list_(kind) if self.udf.is_generator else kind

    def conformed(self, values: Any) -> pa.ChunkedArray:
        """The call's values as its output type, or a ``ContractError`` naming the call (not
        the step's hidden column) and the first value that does not fit its return type."""
        verb = "yielded, per row, lists of" if self.udf.is_generator else "returned"
        subject = Subject(
            f"{self.shown or self.udf.name} {verb}",
            f"declare that type with return_dtype= on {self.udf.name}",
        )
        return to_column(values, self.output_type, subject)


def _arguments(
    layout: tuple[CallArgument, ...], values: list[Any]
) -> tuple[list[Any], dict[str, Any]]:
    args: list[Any] = []
    kwargs: dict[str, Any] = {}
    for keyword, source in layout:
        value = source.value if isinstance(source, Const) else values[source]
        if keyword is None:
            args.append(value)
        else:
            kwargs[keyword] = value
    return args, kwargs


class ColumnCalls:
    """Constructed inside each actor; called with a batch of argument columns."""

    def __init__(self, owner: ClassInstance | None, calls: tuple[CallPlan, ...]) -> None:
        instance = owner.construct() if owner is not None else None
        self._instance = instance
        self._calls = [
            (getattr(instance, call.udf.target) if instance is not None else call.udf.target, call)
            for call in calls
        ]

    def usage_counters(self) -> Any:
        """The ``@vane.cls`` instance's counters, if it keeps any (see ``UdfRuntime``)."""
        counters = getattr(self._instance, "usage_counters", None)
        return counters() if callable(counters) else None

    def teardown(self) -> Any:
        """The ``@vane.cls`` instance's own ``teardown()``, if it has one (its result may be
        awaitable: the runtime awaits it)."""
        hook = getattr(self._instance, "teardown", None)
        return hook() if callable(hook) else None

    def __call__(self, batch: pa.Table) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for fn, call in self._calls:
            if call.udf.batch:
                out[call.output] = _run_batch(fn, call, batch)
            elif call.udf.is_generator:
                out[call.output] = [
                    _plain(list(values), call) for values in _each_row(fn, call, batch)
                ]
            else:
                out[call.output] = _plain(_each_row(fn, call, batch), call)
        return _settled(out, self._calls)


class AsyncColumnCalls(ColumnCalls):
    """The same, for calls among which at least one is ``async def``: rows of the async ones
    overlap, up to the UDF's ``max_concurrency`` per actor."""

    def __init__(self, owner: ClassInstance | None, calls: tuple[CallPlan, ...]) -> None:
        super().__init__(owner, calls)
        limit = min((_rows_in_flight(c.udf) for _, c in self._calls), default=DEFAULT_ASYNC_ROWS)
        import asyncio  # only for async calls: plain ones never load it

        self._rows_in_flight = asyncio.Semaphore(limit)

    async def __call__(self, batch: pa.Table) -> dict[str, Any]:  # type: ignore[override]
        out: dict[str, Any] = {}
        for fn, call in self._calls:
            if call.udf.batch:
                result = _run_batch(fn, call, batch)
                out[call.output] = await result if inspect.isawaitable(result) else result
                continue

            async def one(
                args: list[Any], kwargs: dict[str, Any], fn: Any = fn, call: CallPlan = call
            ) -> Any:
                async with self._rows_in_flight:
                    value = fn(*args, **kwargs)
                    if inspect.isasyncgen(value):
                        return _plain([v async for v in value], call)
                    if inspect.isgenerator(value):
                        return _plain(list(value), call)
                    return await value if inspect.isawaitable(value) else value

            import asyncio

            rows = _row_values(call, batch)
            values = await asyncio.gather(*(one(a, k) for a, k in rows))
            out[call.output] = values if call.udf.is_generator else _plain(values, call)
        return _settled(out, self._calls)


def _rows_in_flight(udf: ColumnUdf) -> int:
    """Rows of an async call that one actor runs at once. A function's ``max_concurrency`` says
    so; a ``@vane.cls`` method's counts actors (``(min, max)`` to scale between), not rows."""
    given = udf.options.max_concurrency
    if udf.owner is None and isinstance(given, int) and given > 0:
        return given
    return DEFAULT_ASYNC_ROWS


def _settled(out: dict[str, Any], calls: list[tuple[Any, CallPlan]]) -> dict[str, Any]:
    """The columns, each in its call's type; if calls reported rows that failed on their own,
    ``RowFailures`` with all of them, so the step's ``on_error`` applies to exactly those
    rows."""
    failed: dict[int, str] = {}
    for name, value in out.items():
        if isinstance(value, RowResults):
            out[name] = value.values
            for row, error in enumerate(value.errors):
                if error is not None:
                    failed.setdefault(row, error)
    if failed:
        rows = sorted(failed)
        raise RowFailures(out, rows, [failed[row] for row in rows])
    for _, call in calls:
        out[call.output] = call.conformed(out[call.output])
    return out


def _plain(values: list[Any], call: CallPlan) -> list[Any]:
    """Dataclass results (a struct return type's natural Python form) as dicts, which Arrow
    reads; other values are left to the batch contract."""
    if not pa.types.is_nested(call.udf.return_type):
        return values
    return [_as_data(v) for v in values]


def _as_data(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    if isinstance(value, (list, tuple)):
        return [_as_data(v) for v in value]
    return value


def _each_row(fn: Any, call: CallPlan, batch: pa.Table) -> list[Any]:
    """``fn`` called on each row's arguments, in order: column by column, without building
    each row's argument list by hand (that cost more than the calls themselves)."""
    rows = batch.num_rows
    where = call.shown or call.udf.name
    columns = [_row_values_of(batch.column(name), name, where) for name in call.columns]

    def values(source: int | Const) -> Any:
        return (
            itertools.repeat(source.value, rows) if isinstance(source, Const) else columns[source]
        )

    positional = [values(source) for keyword, source in call.layout if keyword is None]
    named = [(keyword, values(source)) for keyword, source in call.layout if keyword is not None]
    if not named:
        return list(map(fn, *positional)) if positional else [fn() for _ in range(rows)]
    keywords = [keyword for keyword, _ in named]
    pairs = zip(
        zip(*positional, strict=False) if positional else itertools.repeat((), rows),
        zip(*(column for _, column in named), strict=False),
        strict=False,
    )
    return [fn(*args, **dict(zip(keywords, kwargs, strict=True))) for args, kwargs in pairs]


def _row_values_of(column: pa.ChunkedArray, name: str, where: str) -> list[Any]:
    """A column's values as a row function gets them: a file column's as ``vane.File``s."""
    values = python_values(column, name, where)
    if is_file_type(column.type):
        return [File.from_value(value) for value in values]
    return values


def _row_values(call: CallPlan, batch: pa.Table) -> list[tuple[list[Any], dict[str, Any]]]:
    """Each row's arguments, for calls that are not made at once (an async function's)."""
    return _each_row(lambda *args, **kwargs: (list(args), kwargs), call, batch)


def _run_batch(fn: Any, call: CallPlan, batch: pa.Table) -> Any:
    arrays = [batch.column(name).combine_chunks() for name in call.columns]
    args, kwargs = _arguments(call.layout, arrays)
    result = fn(*args, **kwargs)
    if inspect.isawaitable(result):
        return _checked_later(result, call, batch.num_rows)
    _check_length(result, call, batch.num_rows)
    return result


async def _checked_later(result: Any, call: CallPlan, rows: int) -> Any:
    value = await result
    _check_length(value, call, rows)
    return value


def _check_length(result: Any, call: CallPlan, rows: int) -> None:
    try:
        length = len(result)
    except TypeError:
        raise ContractError(
            f"{call.udf.name} returned {type(result).__name__}; a batch function returns an "
            "array, list or numpy array with one value per input row"
        ) from None
    if length != rows:
        raise ContractError(
            f"{call.udf.name} returned {counted(length, 'value')} for a batch of "
            f"{counted(rows, 'row')}; a batch "
            "function returns exactly one value per input row, in order"
        )
