"""Python type annotations -> Arrow types, for the return types of column UDFs.

``int`` is BIGINT, ``float`` DOUBLE, ``str`` VARCHAR, ``bool`` BOOLEAN, ``bytes`` BLOB,
``list[T]`` a list of T, ``dict[str, T]`` a MAP, a ``TypedDict`` or dataclass a STRUCT of its
fields, ``datetime``/``date``/``time``/``Decimal`` their SQL types; ``Optional[T]`` and
``T | None`` are T (every column may hold nulls).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import decimal
import types
import typing
from typing import Any

import pyarrow as pa

from vane.errors import SchemaError

_SCALARS: dict[Any, pa.DataType] = {
    int: pa.int64(),
    float: pa.float64(),
    str: pa.string(),
    bool: pa.bool_(),
    bytes: pa.binary(),
    dt.datetime: pa.timestamp("us"),
    dt.date: pa.date32(),
    dt.time: pa.time64("us"),
    dt.timedelta: pa.duration("us"),
    decimal.Decimal: pa.decimal128(38, 9),
}


def python_to_arrow(annotation: Any, where: str) -> pa.DataType:
    """The Arrow type for values of a Python type annotation, or a ``SchemaError`` naming it."""
    if annotation in _SCALARS:
        return _SCALARS[annotation]
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin in (typing.Union, types.UnionType):
        rest = [a for a in args if a is not type(None)]
        if len(rest) == 1:
            return python_to_arrow(rest[0], where)
    elif origin in (list, tuple, typing.Sequence) or annotation in (list, tuple):
        items = [a for a in args if a is not Ellipsis]
        if len(set(items)) == 1:
            return pa.list_(python_to_arrow(items[0], where))
    elif origin is dict and len(args) == 2:
        return pa.map_(python_to_arrow(args[0], where), python_to_arrow(args[1], where))
    elif typing.is_typeddict(annotation) or dataclasses.is_dataclass(annotation):
        hints = typing.get_type_hints(annotation)
        return pa.struct([pa.field(n, python_to_arrow(t, where)) for n, t in hints.items()])
    raise SchemaError(
        f"{where}: cannot tell the column type of the annotation {annotation!r}. Pass "
        "return_dtype= with a DuckDB type name such as 'VARCHAR', 'DOUBLE[]' or "
        "'STRUCT(label VARCHAR, score DOUBLE)'"
    )
