"""Lowering a logical plan onto DuckDB: every node becomes a lazy ``DuckDBPyRelation`` on one
cursor. Nothing runs here; DuckDB executes when the relation is read."""

from __future__ import annotations

import duckdb

from vane.errors import ExecutionError, SourceError
from vane.plan.nodes import PlanNode, Source, SqlStep, duckdb_message

Cursor = duckdb.DuckDBPyConnection


def lower(node: PlanNode, cursor: Cursor) -> duckdb.DuckDBPyRelation:
    """The DuckDB relation that computes ``node``, built on ``cursor``."""
    inputs = [lower(child, cursor) for child in node.inputs]
    try:
        if isinstance(node, Source):
            return node.to_duckdb(cursor)
        if isinstance(node, SqlStep):
            return node.apply(cursor, *inputs)
    except duckdb.Error as exc:
        error = SourceError if isinstance(node, Source) else ExecutionError
        raise error(f"step `{node.describe()}` failed: {duckdb_message(exc)}") from exc
    raise TypeError(f"cannot lower plan node {type(node).__name__}")
