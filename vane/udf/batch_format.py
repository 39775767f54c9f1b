"""What a UDF is given: the Arrow table itself (``"pyarrow"``, the default, no copy), a pandas
DataFrame (``"pandas"``) or a dict of numpy arrays (``"numpy"``), as in Ray Data; a row function
gets Python values. Every value arrives exactly, or the batch fails naming the column:

- a null stays distinct from NaN: in the numpy format a numeric or boolean column with nulls is
  a ``numpy.ma.MaskedArray`` (the values, NaN included, and a mask of the nulls); in the pandas
  format it is a pandas masked array (``Int64``, ``UInt64``, ``Float64`` with its NaNs kept,
  ``boolean``), so a 64-bit integer is never widened to a float that cannot hold it;
- a list of numbers, booleans or text is a numpy array per row, as pyarrow gives it, unless a
  null number is inside (it would read as NaN); that list, and every struct, map, or list of
  anything else, is given as Python values (lists, dicts, ``(key, value)`` pairs for a map),
  exactly as a row function sees them;
- nanosecond timestamps and durations reach Python as ``pandas.Timestamp``/``Timedelta``
  (pyarrow's choice, which keeps the nanoseconds); a ``TIME_NS`` value with a part finer than a
  microsecond has no Python, numpy or pandas form (``datetime.time`` stops at microseconds), so
  it fails its rows with a message that says to cast the column or use the pyarrow format.

In the numpy format a column of fixed-size lists (``FLOAT[384]``, ``DOUBLE[3][3]``, images of one
shape) is one n-D array (rows first) when it has no nulls, as the batch contract reads such
arrays back; images of any shape (``vane.types.images.IMAGE``) are an object array of each row's
``(h, w, c)`` pixels (None for a null); any other column is ``to_numpy`` of the column (an
object array for strings and lists).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa

from vane.types.images import IMAGE
from vane.types.images import to_numpy as image_arrays
from vane.udf.batch_contract import ContractError

__all__ = ["python_rows", "python_values", "to_format"]


def _is_tensor(arrow_type: pa.DataType) -> bool:
    return pa.types.is_fixed_size_list(arrow_type) and (
        pa.types.is_integer(arrow_type.value_type)
        or pa.types.is_floating(arrow_type.value_type)
        or pa.types.is_boolean(arrow_type.value_type)
        or _is_tensor(arrow_type.value_type)
    )


def _tensor(column: pa.ChunkedArray) -> np.ndarray | None:
    """A fixed-size-list column without nulls at any level, as one (rows, d1, d2, ...) array."""
    array = column.combine_chunks()
    shape = [len(array)]
    while pa.types.is_fixed_size_list(array.type):
        if array.null_count:
            return None
        shape.append(array.type.list_size)
        array = array.flatten()
    if array.null_count:
        return None
    return np.asarray(array.to_numpy(zero_copy_only=False)).reshape(shape)


def _masked_kind(arrow_type: pa.DataType) -> bool:
    """Types whose numpy form has no null of its own (a null would become NaN, or widen an
    integer column to floats)."""
    return bool(
        pa.types.is_integer(arrow_type)
        or pa.types.is_floating(arrow_type)
        or pa.types.is_boolean(arrow_type)
    )


def _values_and_mask(column: pa.ChunkedArray) -> tuple[np.ndarray, np.ndarray]:
    """A numeric or boolean column with nulls as its numpy values (nulls filled with a zero
    that is never read) and the mask of its nulls."""
    array = column.combine_chunks()
    mask = np.asarray(array.is_null().to_numpy(zero_copy_only=False))
    zero = pa.scalar(False if pa.types.is_boolean(array.type) else 0, array.type)
    values = np.asarray(array.fill_null(zero).to_numpy(zero_copy_only=False))
    return values, mask


def _plain_leaf(arrow_type: pa.DataType) -> bool:
    """Leaf types that pyarrow hands to numpy exactly inside a list: numbers, booleans, text."""
    return bool(
        _masked_kind(arrow_type)
        or pa.types.is_string(arrow_type)
        or pa.types.is_large_string(arrow_type)
        or pa.types.is_binary(arrow_type)
        or pa.types.is_large_binary(arrow_type)
    )


def _is_list(arrow_type: pa.DataType) -> bool:
    return bool(
        pa.types.is_list(arrow_type)
        or pa.types.is_large_list(arrow_type)
        or pa.types.is_fixed_size_list(arrow_type)
    )


def _null_inside(array: pa.Array) -> bool:
    """Whether a list array holds a null number or boolean at some depth (pyarrow would give
    it as NaN inside a numpy array)."""
    if _is_list(array.type):
        return _null_inside(array.flatten())
    return bool(array.null_count) and _masked_kind(array.type)


def _lists_of_plain(arrow_type: pa.DataType) -> bool:
    if _is_list(arrow_type):
        return _lists_of_plain(arrow_type.value_type)
    return _plain_leaf(arrow_type)


def _as_objects(column: pa.ChunkedArray) -> np.ndarray | None:
    """A nested column as an object array of Python values (lists, dicts, exact timestamps; a
    null is None), unless it is lists of numbers, booleans or text without a null number
    inside, which pyarrow gives exactly as numpy arrays; None for a column that is not
    nested."""
    if not pa.types.is_nested(column.type):
        return None
    if _lists_of_plain(column.type) and not any(_null_inside(c) for c in column.chunks):
        return None
    objects = np.empty(len(column), dtype=object)
    objects[:] = column.to_pylist()
    return objects


def _numpy(column: pa.ChunkedArray) -> np.ndarray:
    if column.type == IMAGE:  # images of any shape: each its (h, w, c) pixels, as Ray Data
        images = np.empty(len(column), dtype=object)
        for row, pixels in enumerate(image_arrays(column)):  # one by one: never broadcast
            images[row] = pixels
        return images
    if _is_tensor(column.type):
        tensor = _tensor(column)
        if tensor is not None:
            return tensor
    if column.null_count and _masked_kind(column.type):
        values, mask = _values_and_mask(column)
        return np.ma.MaskedArray(values, mask=mask)
    objects = _as_objects(column)
    return np.asarray(column.to_numpy()) if objects is None else objects


def _pandas(table: pa.Table) -> Any:
    import pandas as pd

    frame = table.to_pandas()
    for name in table.column_names:
        column = table.column(name)
        objects = _as_objects(column)
        if objects is not None:
            frame[name] = pd.Series(objects, index=frame.index, name=name)
            continue
        if not (column.null_count and _masked_kind(column.type)):
            continue
        values, mask = _values_and_mask(column)
        if pa.types.is_boolean(column.type):
            masked: Any = pd.arrays.BooleanArray(values, mask)
        elif pa.types.is_floating(column.type):
            masked = pd.arrays.FloatingArray(values, mask)
        else:
            masked = pd.arrays.IntegerArray(values, mask)
        frame[name] = pd.Series(masked, index=frame.index, name=name)
    return frame


def _check_python(table: pa.Table, where: str) -> None:
    """Fail, naming the column, if a value has no exact Python form."""
    for name in table.column_names:
        column = table.column(name)
        if _has_fine_times(column.type):
            try:
                _finer_than_micros(column)
            except pa.ArrowInvalid:
                raise ContractError(
                    f"{where}: column {name!r} ({column.type}) holds a time of day with "
                    "nanoseconds, which Python, numpy and pandas cannot hold (datetime.time "
                    "stops at microseconds). Cast the column to TIME first, or use "
                    "map_batches with the default batch_format='pyarrow'"
                ) from None


def _has_fine_times(arrow_type: pa.DataType) -> bool:
    if pa.types.is_time64(arrow_type):
        return bool(arrow_type.unit == "ns")
    return any(_has_fine_times(arrow_type.field(i).type) for i in range(arrow_type.num_fields))


def _finer_than_micros(column: pa.ChunkedArray | pa.Array) -> None:
    """Raise ``ArrowInvalid`` if a nanosecond time anywhere in ``column`` is not whole
    microseconds (Arrow's safe cast refuses to truncate)."""
    arrow_type = column.type
    if not _has_fine_times(arrow_type):
        return
    if pa.types.is_time64(arrow_type):
        column.cast(pa.time64("us"), safe=True)
        return
    chunks = column.chunks if isinstance(column, pa.ChunkedArray) else [column]
    for chunk in chunks:
        if pa.types.is_struct(arrow_type):
            for child in chunk.flatten():
                _finer_than_micros(child)
        elif pa.types.is_map(arrow_type):
            _finer_than_micros(chunk.keys)
            _finer_than_micros(chunk.items)
        elif _is_list(arrow_type):
            _finer_than_micros(chunk.flatten())


def python_values(column: pa.ChunkedArray | pa.Array, name: str, where: str) -> list[Any]:
    """A column's values as Python objects, exactly (see the module's docstring)."""
    if _has_fine_times(column.type):
        _check_python(pa.table({name: column}), where)
    values: list[Any] = column.to_pylist()
    return values


def python_rows(table: pa.Table, where: str) -> list[dict[str, Any]]:
    """A table's rows as dicts of Python values, exactly."""
    _check_python(table, where)
    rows: list[dict[str, Any]] = table.to_pylist()
    return rows


def to_format(table: pa.Table, batch_format: str, where: str) -> Any:
    """``table`` as the UDF asked for it."""
    if batch_format == "pyarrow":
        return table
    _check_python(table, where)
    if batch_format == "pandas":
        return _pandas(table)
    return {name: _numpy(table.column(name)) for name in table.column_names}
