"""What a batch UDF is handed: the Arrow table itself (``"pyarrow"``, the default, no copy), a
pandas DataFrame (``"pandas"``) or a dict of numpy arrays (``"numpy"``), as in Ray Data.

In the numpy format a column of fixed-size lists (``FLOAT[384]``, ``DOUBLE[3][3]``) is one n-D
array (rows first) when it has no nulls, as the batch contract reads such arrays back; any other
column is ``to_numpy`` of the column (an object array for strings, lists and nullable values).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa


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


def _numpy(column: pa.ChunkedArray) -> np.ndarray:
    if _is_tensor(column.type):
        tensor = _tensor(column)
        if tensor is not None:
            return tensor
    return np.asarray(column.to_numpy())


def to_format(table: pa.Table, batch_format: str) -> Any:
    """``table`` as the UDF asked for it."""
    if batch_format == "pandas":
        return table.to_pandas()
    if batch_format == "numpy":
        return {name: _numpy(table.column(name)) for name in table.column_names}
    return table
