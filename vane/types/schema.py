"""Schema specifications: what users write for ``schema=`` and how it becomes a ``pa.Schema``."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TypeAlias

import pyarrow as pa

from vane.errors import SchemaError
from vane.types.names import arrow_to_duckdb, duckdb_to_arrow

TypeSpec: TypeAlias = "str | pa.DataType"
SchemaSpec: TypeAlias = "pa.Schema | Mapping[str, TypeSpec] | Iterable[tuple[str, TypeSpec]]"


def to_arrow_type(spec: TypeSpec) -> pa.DataType:
    """A DuckDB type name or an Arrow type, as an Arrow type."""
    if isinstance(spec, pa.DataType):
        return spec
    if isinstance(spec, str):
        return duckdb_to_arrow(spec)
    raise SchemaError(
        f"a column type must be a DuckDB type name such as 'BIGINT' or a pyarrow DataType, "
        f"got {type(spec).__name__} {spec!r}"
    )


def to_arrow_schema(spec: SchemaSpec) -> pa.Schema:
    """A ``pa.Schema`` from ``{name: type}``, a list of ``(name, type)`` pairs, or a ``pa.Schema``.

    >>> to_arrow_schema({"id": "BIGINT", "embedding": "FLOAT[]"})
    id: int64
    embedding: list<l: float>
      child 0, l: float
    """
    if isinstance(spec, pa.Schema):
        return spec
    if isinstance(spec, Mapping):
        pairs = list(spec.items())
    elif isinstance(spec, (str, bytes)) or not isinstance(spec, Iterable):
        raise SchemaError(
            "schema must be a dict of {column: type}, such as {'id': 'BIGINT'}, or a pyarrow "
            f"Schema; got {type(spec).__name__}"
        )
    else:
        pairs = list(spec)  # type: ignore[arg-type]  # entries are checked one by one below
    fields = []
    seen: set[str] = set()
    for pair in pairs:
        if not (isinstance(pair, tuple) and len(pair) == 2 and isinstance(pair[0], str)):
            raise SchemaError(f"schema entries must be (column name, type) pairs, got {pair!r}")
        name, type_spec = pair
        if name in seen:
            raise SchemaError(f"schema names column {name!r} twice; column names must be unique")
        seen.add(name)
        try:
            fields.append(pa.field(name, to_arrow_type(type_spec)))
        except SchemaError as exc:
            raise SchemaError(f"column {name!r}: {exc}") from exc.__cause__
    if not fields:
        raise SchemaError("schema is empty; name at least one column, such as {'id': 'BIGINT'}")
    return pa.schema(fields)


def describe_schema(schema: pa.Schema) -> str:
    """``name TYPE, ...`` with DuckDB type names, as shown by ``repr`` and ``explain``."""
    return ", ".join(f"{f.name} {arrow_to_duckdb(f.type)}" for f in schema)
