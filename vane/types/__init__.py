"""Types: DuckDB type names <-> Arrow types, and schema specifications."""

from __future__ import annotations

from vane.types.names import arrow_to_duckdb, duckdb_to_arrow
from vane.types.schema import SchemaSpec, TypeSpec, describe_schema, to_arrow_schema, to_arrow_type

__all__ = [
    "SchemaSpec",
    "TypeSpec",
    "arrow_to_duckdb",
    "describe_schema",
    "duckdb_to_arrow",
    "to_arrow_schema",
    "to_arrow_type",
]
