"""DuckDB type names <-> Arrow types.

DuckDB is the authority on its own type names: ``SELECT NULL::<name>`` parses any name it accepts
(nested ``STRUCT``/``MAP``/``LIST``/``ARRAY`` types, ``DECIMAL(p, s)``, ``JSON`` ...) and its Arrow
export gives the Arrow type that data of that type arrives as. Asking DuckDB keeps this module
exactly in step with what the engine produces, instead of a second hand-written parser drifting
from it.
"""

from __future__ import annotations

import functools

import pyarrow as pa

from vane.errors import SchemaError

# The database (``vane._engine``, and DuckDB with it) is imported by the functions that ask
# it, not here: ``vane.types`` is imported by worker processes, which only name types when
# describing a mismatch.

# A type name is one expression of the type grammar; anything that could end or extend the
# statement is rejected before it reaches SQL.
_FORBIDDEN = (";", "--", "/*")


@functools.lru_cache(maxsize=512)
def duckdb_to_arrow(name: str) -> pa.DataType:
    """The Arrow type that DuckDB produces for the type called ``name``.

    >>> duckdb_to_arrow("FLOAT[3]")
    FixedSizeListType(fixed_size_list<: float>[3])
    """
    if not isinstance(name, str) or not name.strip():
        raise SchemaError(f"a type name must be a non-empty string such as 'BIGINT', got {name!r}")
    if any(token in name for token in _FORBIDDEN):
        raise SchemaError(f"invalid type name {name!r}: it contains {_FORBIDDEN!r} characters")
    from vane import _engine

    with _engine.scratch() as cursor:
        try:
            schema = cursor.sql(f"SELECT NULL::{name} AS t").to_arrow_table().schema
        except _engine.Error as exc:
            detail = str(exc).splitlines()[0]
            raise SchemaError(
                f"invalid type name {name!r}: {detail}. Use a DuckDB type name such as 'BIGINT', "
                "'DOUBLE', 'VARCHAR', 'FLOAT[384]' or 'STRUCT(a VARCHAR, b DOUBLE)'"
            ) from exc
    return schema.field(0).type


@functools.lru_cache(maxsize=512)
def arrow_to_duckdb(arrow_type: pa.DataType) -> str:
    """The DuckDB type name for data of an Arrow type.

    >>> arrow_to_duckdb(pa.list_(pa.float32(), 3))
    'FLOAT[3]'
    """
    from vane import _engine

    empty = pa.table({"t": pa.array([], type=arrow_type)})
    with _engine.scratch() as cursor:
        try:
            return str(cursor.from_arrow(empty).types[0])
        except _engine.Error as exc:
            raise SchemaError(f"Arrow type {arrow_type} has no DuckDB equivalent: {exc}") from exc
