"""The batch contract: what a UDF may return, and how it becomes a table of the declared schema.

A UDF returns a ``pa.Table``, a ``pa.RecordBatch``, a dict of columns (lists, Arrow arrays or
numpy arrays) or a pandas DataFrame. Its columns must be exactly the declared ones (their order
does not matter). A column of another type is cast only when no information can be lost: numbers
to wider or floating types (values are checked, so 3.0 -> 3 is fine and 3.5 -> 3 is not), lists
to lists or fixed-size lists of castable items, structs field by field, strings and binaries to
their large forms. Text never silently becomes a number, nor a number text.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa

from vane.errors import SchemaMismatchError
from vane.types import arrow_to_duckdb


def _describe(arrow_type: pa.DataType) -> str:
    try:
        return arrow_to_duckdb(arrow_type)
    except Exception:  # a type DuckDB has no name for is still worth naming
        return str(arrow_type)


def _is_number(t: pa.DataType) -> bool:
    return bool(pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_decimal(t))


def castable(source: pa.DataType, target: pa.DataType) -> bool:
    """Whether a value of ``source`` may become ``target`` without changing what it means."""
    if pa.types.is_null(source) or source.equals(target):
        return True
    if _is_number(source) and _is_number(target):
        return True
    list_like = (pa.types.is_list, pa.types.is_large_list, pa.types.is_fixed_size_list)
    if any(f(source) for f in list_like) and any(f(target) for f in list_like):
        return castable(source.value_type, target.value_type)
    if pa.types.is_struct(source) and pa.types.is_struct(target):
        names = {source.field(i).name: source.field(i).type for i in range(source.num_fields)}
        return set(names) == {target.field(i).name for i in range(target.num_fields)} and all(
            castable(names[target.field(i).name], target.field(i).type)
            for i in range(target.num_fields)
        )
    if pa.types.is_map(source) and pa.types.is_map(target):
        return castable(source.key_type, target.key_type) and castable(
            source.item_type, target.item_type
        )
    texts = (pa.types.is_string, pa.types.is_large_string, pa.types.is_string_view)
    binaries = (pa.types.is_binary, pa.types.is_large_binary, pa.types.is_binary_view)
    for family in (texts, binaries):
        if any(f(source) for f in family) and any(f(target) for f in family):
            return True
    if pa.types.is_dictionary(source):
        return castable(source.value_type, target)
    temporal = (pa.types.is_timestamp, pa.types.is_date)
    return any(f(source) for f in temporal) and any(f(target) for f in temporal)


class ContractError(SchemaMismatchError):
    """A UDF's output does not fit its declared schema (raised inside the actor)."""


def _first_bad_row(values: Any, target: pa.DataType) -> tuple[int, Any]:
    """The first value that cannot be converted or cast, found one row at a time (error path
    only)."""
    if isinstance(values, (pa.Array, pa.ChunkedArray)):
        for i in range(len(values)):
            try:
                values.slice(i, 1).cast(target, safe=True)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError):
                return i, values[i].as_py()
        return -1, None
    for i, value in enumerate(values):
        try:
            pa.array([value], type=target)
        except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError, OverflowError):
            return i, value
    return -1, None


def _to_column(name: str, values: Any, target: pa.DataType, where: str) -> pa.ChunkedArray:
    if isinstance(values, pa.ChunkedArray):
        column = values
    elif isinstance(values, pa.Array):
        column = pa.chunked_array([values])
    else:
        if isinstance(values, np.ndarray) and values.ndim > 1:
            values = list(values)  # rows of a 2-D array are the items of a list column
        try:
            column = pa.chunked_array([pa.array(values, type=target, from_pandas=True)])
        except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError, OverflowError):
            try:  # the values' own type makes for a clearer message below
                column = pa.chunked_array([pa.array(values, from_pandas=True)])
            except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError, OverflowError):
                row, value = _first_bad_row(values, target)
                raise ContractError(
                    f"{where} returned a value in column {name!r} that cannot be stored as "
                    f"{_describe(target)}: row {row} is {value!r} ({type(value).__name__}). "
                    "Return strings, numbers, lists, dicts, bytes or Arrow arrays, matching "
                    "the schema"
                ) from None
    if column.type.equals(target):
        return column
    if not castable(column.type, target):
        raise ContractError(
            f"{where} returned column {name!r} as {_describe(column.type)}, but the schema "
            f"says {_describe(target)}, and {_describe(column.type)} cannot become "
            f"{_describe(target)} without changing its values. Return {_describe(target)} "
            f"values, or declare {name!r}: {_describe(column.type)!r} in the schema"
        )
    try:
        return column.cast(target, safe=True)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
        row, value = _first_bad_row(column, target)
        raise ContractError(
            f"{where} returned column {name!r} as {_describe(column.type)}; casting it to "
            f"{_describe(target)} would lose information at row {row} (value {value!r}): "
            f"{exc}. Return {_describe(target)} values, or change the schema"
        ) from None


def _columns_of(result: Any, where: str) -> dict[str, Any]:
    if isinstance(result, pa.Table):
        return {name: result.column(name) for name in result.column_names}
    if isinstance(result, pa.RecordBatch):
        return {name: result.column(name) for name in result.schema.names}
    if isinstance(result, dict):
        return result
    module = type(result).__module__
    if module.startswith("pandas") and type(result).__name__ == "DataFrame":
        return {str(name): result[name].to_numpy() for name in result.columns}
    raise ContractError(
        f"{where} returned {type(result).__name__}; return a pyarrow Table or RecordBatch, a "
        "dict of columns, or a pandas DataFrame"
    )


def conform(result: Any, schema: pa.Schema, where: str) -> pa.Table:
    """The UDF's ``result`` as a table of exactly ``schema``, or a ``ContractError`` naming the
    column, the expected and actual type and the first offending row."""
    columns = _columns_of(result, where)
    if isinstance(result, (pa.Table, pa.RecordBatch)):
        names = result.schema.names
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise ContractError(f"{where} returned column(s) {duplicates} more than once")
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
    arrays = [_to_column(n, columns[n], schema.field(n).type, where) for n in expected]
    lengths = {n: len(a) for n, a in zip(expected, arrays, strict=True)}
    if len(set(lengths.values())) > 1:
        raise ContractError(f"{where} returned columns of different lengths: {lengths}")
    return pa.Table.from_arrays(arrays, schema=schema)
