"""The batch contract: what a UDF may return, and how it becomes a table of the declared schema.

A UDF returns a ``pa.Table``, a ``pa.RecordBatch``, a dict of columns (lists, Arrow arrays, numpy
arrays or pandas Series) or a pandas DataFrame. Its columns must be exactly the declared ones
(their order does not matter). Each column is read in its own type first (Python values are
never converted straight to the declared type, which would truncate 3.7 into 3), then cast to the
declared type only if every value means the same there (``vane.types.cast``): 3.0 -> 3 is fine,
3.5 -> 3 is an error naming the row. A numpy array of more than one dimension is a column of
nested fixed-size lists (``DOUBLE[3][3]`` for one 3x3 matrix per row).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from vane._arrow import exact_array, is_pandas
from vane.errors import SchemaMismatchError
from vane.types import arrow_to_duckdb
from vane.types.cast import LossyCast, cast_lossless, castable, mismatch
from vane.types.images import from_tensor_extension

__all__ = ["ContractError", "castable", "conform"]

_CONVERSION_ERRORS = (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError, OverflowError)
# No message shows more than this much of a value.
_SHOWN_CHARS = 80


class ContractError(SchemaMismatchError):
    """A UDF's output does not fit its declared schema (raised inside the actor); ``row`` is
    the batch's row that did not fit, where one did."""

    def __init__(self, message: str, row: int | None = None) -> None:
        super().__init__(message)
        self.row = row


def _describe(arrow_type: pa.DataType) -> str:
    try:
        return arrow_to_duckdb(arrow_type)
    except Exception:  # a type DuckDB has no name for is still worth naming
        return str(arrow_type)


def shorten(value: Any) -> str:
    """A value as a message may show it: a few items of a long list, the start of long text."""
    if isinstance(value, (list, tuple)) and len(value) > 6:
        head = ", ".join(shorten(v) for v in value[:3])
        return f"[{head}, ... ({len(value)} items)]"
    text = repr(value)
    if len(text) > _SHOWN_CHARS:
        size = f" ({len(value):,} characters)" if isinstance(value, (str, bytes)) else ""
        return f"{text[:_SHOWN_CHARS]}...{size}"
    return text


# ---- reading a returned column in its own type ----------------------------------------------


def _tensor(values: np.ndarray) -> pa.Array:
    """An n-D array (n >= 2): one (n-1)-D tensor per row, as nested fixed-size lists, without
    a Python loop."""
    array = pa.array(np.ascontiguousarray(values).reshape(-1))
    for size in reversed(values.shape[1:]):
        array = pa.FixedSizeListArray.from_arrays(array, size)
    return array


def _rows_of_tensors(values: list[Any]) -> np.ndarray | None:
    """A list of equally shaped n-D arrays (n >= 2), stacked; None if it is not one."""
    if not values or not all(isinstance(v, np.ndarray) and v.ndim >= 2 for v in values):
        return None
    shapes = {v.shape for v in values}
    return np.stack(values) if len(shapes) == 1 else None


def _finer_unit(values: Any, column: pa.ChunkedArray, target: pa.DataType) -> pa.ChunkedArray:
    """Python timestamps and durations are read in microseconds unless asked otherwise, which
    would cut the nanoseconds of a ``pandas.Timestamp``; read them again in ``target``'s finer
    unit (keeping their own time zone, if any) when it has one."""
    kind = column.type
    if not (
        (pa.types.is_timestamp(kind) and pa.types.is_timestamp(target))
        or (pa.types.is_duration(kind) and pa.types.is_duration(target))
    ) or _UNITS.index(target.unit) <= _UNITS.index(kind.unit):
        return column
    finer = (
        pa.timestamp(target.unit, kind.tz)
        if pa.types.is_timestamp(kind)
        else pa.duration(target.unit)
    )
    try:
        array = exact_array(values, finer)
    except _CONVERSION_ERRORS:  # out of the finer unit's range: no finer part to keep
        return column
    return array if isinstance(array, pa.ChunkedArray) else pa.chunked_array([array])


_UNITS = ("s", "ms", "us", "ns")


def _natural(values: Any, target: pa.DataType) -> pa.ChunkedArray:
    """``values`` as Arrow in the type they have; raises a conversion error when Python values
    mix kinds Arrow cannot hold in one column."""
    if isinstance(values, pa.ChunkedArray):
        return values
    if isinstance(values, pa.Array):
        return pa.chunked_array([values])
    if isinstance(values, np.ndarray) and values.ndim > 1 and not np.ma.isMaskedArray(values):
        return pa.chunked_array([_tensor(values)])
    if isinstance(values, (list, tuple)):
        stacked = _rows_of_tensors(list(values))
        if stacked is not None:
            return pa.chunked_array([_tensor(stacked)])
        if any(isinstance(v, np.ndarray) and v.ndim >= 2 for v in values):
            values = [v.tolist() if isinstance(v, np.ndarray) else v for v in values]
    if _has_map(target) and not _is_arrow_like(values):
        # Arrow reads a dict as a struct: maps are read with the declared type (below)
        raise TypeError("a map column is read with its declared type")
    if (
        isinstance(values, np.ndarray)
        and np.issubdtype(values.dtype, np.datetime64)
        and pa.types.is_timestamp(target)
        and target.tz is not None
    ):
        # numpy's datetime64 has no time zone: it holds UTC, as numpy and pandas mean it
        unit = np.datetime_data(values.dtype)[0]
        if unit in _UNITS:
            values = pa.array(values).cast(pa.timestamp(unit, target.tz))
    array = exact_array(values)  # a ChunkedArray past 2 GiB of text
    column = array if isinstance(array, pa.ChunkedArray) else pa.chunked_array([array])
    return _finer_unit(values, column, target)


def _is_arrow_like(values: Any) -> bool:
    return isinstance(values, np.ndarray) or is_pandas(values)


def _python_objects(values: Any) -> list[Any] | None:
    """``values`` as a list if they are Python objects (a list, or a numpy array or pandas
    column of objects), else None."""
    if isinstance(values, (list, tuple)):
        return list(values)
    if _is_arrow_like(values) and getattr(values, "dtype", None) == np.dtype(object):
        return list(values)
    return None


def _typed_first(target: pa.DataType) -> bool:
    """Nested types whose Python values Arrow would read in another shape or unit (a dict as
    a struct instead of a map, a nanosecond ``pandas.Timestamp`` as microseconds, an aware
    datetime inside a struct): such values are converted with the declared type directly,
    and kept only if every one reads back the same."""
    if not pa.types.is_nested(target):
        return False
    if _is_list(target):
        return _typed_first(target.value_type) or _fine_leaf(target.value_type)
    return True


def _fine_leaf(arrow_type: pa.DataType) -> bool:
    return bool(
        pa.types.is_temporal(arrow_type)
        or pa.types.is_decimal(arrow_type)
        or pa.types.is_dictionary(arrow_type)
    )


def _is_list(arrow_type: pa.DataType) -> bool:
    return bool(
        pa.types.is_list(arrow_type)
        or pa.types.is_large_list(arrow_type)
        or pa.types.is_fixed_size_list(arrow_type)
        or pa.types.is_list_view(arrow_type)
        or pa.types.is_large_list_view(arrow_type)
    )


def _has_map(arrow_type: pa.DataType) -> bool:
    if pa.types.is_map(arrow_type):
        return True
    return any(_has_map(arrow_type.field(i).type) for i in range(arrow_type.num_fields))


def _as_pairs(value: Any, arrow_type: pa.DataType) -> Any:
    """A Python value with each map given as a dict turned into Arrow's form of a map, a list
    of (key, value) pairs, as deep as ``arrow_type`` nests maps."""
    if value is None or not _has_map(arrow_type):
        return value
    if pa.types.is_map(arrow_type):
        pairs = value.items() if isinstance(value, dict) else value
        return [
            (_as_pairs(k, arrow_type.key_type), _as_pairs(v, arrow_type.item_type))
            for k, v in pairs
        ]
    if pa.types.is_struct(arrow_type) and isinstance(value, dict):
        return {
            k: _as_pairs(v, arrow_type.field(k).type) if k in arrow_type.names else v
            for k, v in value.items()
        }
    if _is_list(arrow_type) and isinstance(value, (list, tuple, np.ndarray)):
        return [_as_pairs(v, arrow_type.value_type) for v in value]
    return value


def _same(got: Any, given: Any) -> bool:
    """Whether a value read back from Arrow is the value given (NaN equal to NaN; a map read
    back as pairs equal to the dict or pairs it was given as)."""
    if isinstance(given, np.ndarray):
        given = given.tolist()
    if isinstance(given, float) and isinstance(got, float):
        return got == given or (math.isnan(got) and math.isnan(given))
    if isinstance(given, dict) and isinstance(got, list):
        given = list(given.items())
    if isinstance(given, dict) and isinstance(got, dict):
        return given.keys() == got.keys() and all(_same(got[k], given[k]) for k in given)
    if isinstance(given, (list, tuple)) and isinstance(got, (list, tuple)):
        return len(given) == len(got) and all(_same(a, b) for a, b in zip(got, given, strict=True))
    if isinstance(got, bool) != isinstance(given, bool):
        return False  # True is 1 to Python, not to a column
    return bool(got == given)


def _typed_exactly(values: Any, target: pa.DataType) -> pa.Array | pa.ChunkedArray | None:
    """``values`` converted with the declared type, if every one reads back the same (for
    values Arrow cannot type on its own: ints past 64 bits, maps given as dicts or pairs)."""
    values = list(values)
    try:
        array = exact_array([_as_pairs(v, target) for v in values], target)
    except _CONVERSION_ERRORS:
        return None
    return array if _same(array.to_pylist(), values) else None


def _first_bad_value(values: Any, target: pa.DataType) -> tuple[int, Any, str] | None:
    """The first Python value that cannot become ``target`` on its own (error path only)."""
    for row, value in enumerate(values):
        try:
            cast_lossless(exact_array([value]), target)
        except LossyCast as exc:
            return row, value, exc.reason
        except _CONVERSION_ERRORS as exc:
            if _typed_exactly([value], target) is None:
                return row, value, f"Arrow cannot store it as that type ({exc})"
    return None


@dataclass(frozen=True)
class Subject:
    """Who returned a column, as an error names it: "udf step `x` returned column 'y'" for a
    batch UDF's declared column, "bad(id) returned" for a column UDF's values; ``declare`` is
    how to widen the type instead ("declare 'y': 'BIGINT' in the schema")."""

    text: str
    declare: str

    def declared_as(self, actual: str) -> str:
        return self.declare.format(actual=actual)


def _python_column(values: Any, target: pa.DataType, subject: Subject) -> pa.ChunkedArray:
    """Python values that Arrow cannot read as one type (ints beyond 64 bits, say): converted
    with the declared type, and kept only if every value reads back the same."""
    array = _typed_exactly(values, target)
    if array is not None:
        return array if isinstance(array, pa.ChunkedArray) else pa.chunked_array([array])
    bad = _first_bad_value(values, target)
    row = None
    if bad is None:
        kinds = sorted({type(v).__name__ for v in values if v is not None})
        detail = f"it mixes values of kinds {kinds} that no one column type holds"
    else:
        row, value, reason = bad
        detail = f"row {row} is {shorten(value)} ({type(value).__name__}): {reason}"
    raise ContractError(
        f"{subject.text} values that cannot be stored as {_describe(target)}: {detail}. Return "
        f"{_describe(target)} values (strings, numbers, lists, dicts, bytes or Arrow arrays, "
        "matching the schema)",
        row=row,
    )


def to_column(values: Any, target: pa.DataType, subject: Subject) -> pa.ChunkedArray:
    """``values`` (an Arrow array, numpy array, pandas Series or Python list) as a column of
    ``target`` by lossless casts only, or a ``ContractError`` naming ``subject`` and the first
    value that does not fit."""
    values = _held_tensors(values)
    objects = _python_objects(values)
    if objects is not None and _typed_first(target):
        typed = _typed_exactly(objects, target)
        if typed is not None:
            return typed if isinstance(typed, pa.ChunkedArray) else pa.chunked_array([typed])
    try:
        column = _natural(values, target)
    except _CONVERSION_ERRORS:
        return _python_column(values, target, subject)
    if column.type.equals(target):
        return column
    actual = _describe(column.type)
    if not castable(column.type, target):
        raise ContractError(
            f"{subject.text} {actual}, but {_describe(target)} was declared, and {actual} "
            f"cannot become {_describe(target)} without changing its values "
            f"({mismatch(column.type, target)}). Return {_describe(target)} values, or "
            f"{subject.declared_as(actual)}"
        )
    pieces: list[pa.Array] = []
    offset = 0
    for chunk in column.chunks:
        try:
            cast = cast_lossless(chunk, target)
        except LossyCast as exc:
            raise _lossy(column, target, subject, exc, offset=offset) from None
        pieces.extend(cast.chunks if isinstance(cast, pa.ChunkedArray) else [cast])
        offset += len(chunk)
    return pa.chunked_array(pieces, type=target)


def _lossy(
    column: pa.ChunkedArray,
    target: pa.DataType,
    subject: Subject,
    exc: LossyCast,
    *,
    offset: int,
) -> ContractError:
    actual, wanted = _describe(column.type), _describe(target)
    row = None
    if exc.row is None:
        detail = exc.reason
    else:
        row = offset + exc.row
        value = column[row].as_py()
        detail = f"row {row} is {shorten(value)}: {exc.reason}"
    return ContractError(
        f"{subject.text} {actual}, and a value does not fit {wanted} without changing: "
        f"{detail}. Return {wanted} values, or {subject.declared_as(actual)}",
        row=row,
    )


def _declared_column(name: str, where: str) -> Subject:
    return Subject(
        f"{where} returned column {name!r} as",
        f"declare {name!r}: {{actual!r}} in the schema",
    )


# ---- the whole batch ------------------------------------------------------------------------


def _columns_of(result: Any, where: str) -> dict[str, Any]:
    if isinstance(result, pa.Table):
        return {name: result.column(name) for name in result.column_names}
    if isinstance(result, pa.RecordBatch):
        return {name: result.column(name) for name in result.schema.names}
    if isinstance(result, dict):
        return result
    module = type(result).__module__
    if module.startswith("pandas") and type(result).__name__ == "DataFrame":
        return {str(name): result[name] for name in result.columns}
    raise ContractError(
        f"{where} returned {type(result).__name__}; return a pyarrow Table or RecordBatch, a "
        "dict of columns, or a pandas DataFrame"
    )


def _held_tensors(values: Any) -> Any:
    """Arrow's canonical ``fixed_shape_tensor`` as nested fixed-size lists (``FLOAT[4][3]``),
    the type that keeps its shape through DuckDB, which drops extension types."""
    if isinstance(values, (pa.Array, pa.ChunkedArray)) and isinstance(
        values.type, pa.FixedShapeTensorType
    ):
        return from_tensor_extension(values)
    return values


def _as_returned(columns: dict[str, Any], where: str) -> pa.Table:
    arrays = {}
    for name, returned in columns.items():
        values = _held_tensors(returned)
        try:
            arrays[str(name)] = _natural(values, pa.null())
        except _CONVERSION_ERRORS as exc:
            raise ContractError(
                f"{where} returned column {name!r} with values Arrow cannot hold in one type "
                f"({exc}); return one kind of value per column, or pass schema= to say which"
            ) from None
    lengths = {n: len(a) for n, a in arrays.items()}
    if len(set(lengths.values())) > 1:
        raise ContractError(f"{where} returned columns of different lengths: {lengths}")
    return pa.table(arrays)


def conform(result: Any, schema: pa.Schema | None, where: str) -> pa.Table:
    """The UDF's ``result`` as a table of exactly ``schema``, or a ``ContractError`` naming the
    column, the expected and actual type and the first offending row. Without a schema (the
    step learns its schema from this output), the columns in the types they have."""
    columns = _columns_of(result, where)
    if isinstance(result, (pa.Table, pa.RecordBatch)):
        names = result.schema.names
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise ContractError(f"{where} returned column(s) {duplicates} more than once")
    if schema is None:
        return _as_returned(columns, where)
    expected = schema.names
    missing = [n for n in expected if n not in columns]
    extra = [n for n in columns if n not in expected]
    if missing or extra:
        parts = []
        if missing:
            parts.append(f"is missing column(s) {missing}")
        if extra:
            parts.append(f"has column(s) {extra} that the schema does not declare")
        raise ContractError(
            f"{where} returned a batch that {' and '.join(parts)}. The schema declares "
            f"{expected}; return exactly those columns (drop the others, or declare them)"
        )
    arrays = [
        to_column(columns[n], schema.field(n).type, _declared_column(n, where)) for n in expected
    ]
    lengths = {n: len(a) for n, a in zip(expected, arrays, strict=True)}
    if len(set(lengths.values())) > 1:
        raise ContractError(f"{where} returned columns of different lengths: {lengths}")
    return pa.Table.from_arrays(arrays, schema=schema)
