"""Lowering a logical plan onto DuckDB: every node becomes a lazy ``DuckDBPyRelation`` on one
cursor. A UDF step becomes an Arrow stream that DuckDB reads lazily (``from_arrow``), fed by the
step's actor pool, which reads its own input on its own cursor. Nothing runs here; work starts
when the relation is read."""

from __future__ import annotations

from typing import Protocol

import pyarrow as pa

from vane._sql import duckdb_message
from vane.backend.compile import apply, scan
from vane.backend.connection import Cursor, Error, Relation
from vane.errors import ExecutionError, SourceError
from vane.plan.nodes import FileScan, PlanNode, Source, SqlStep, UdfStep
from vane.plan.traverse import walk


class UdfStreams(Protocol):
    """What a runner gives the lowering: each UDF step's output stream, and for a node whose
    rows it keeps or streams from elsewhere, the source that reads them in its place."""

    def udf_reader(self, node: UdfStep) -> pa.RecordBatchReader: ...
    def spooled(self, node: PlanNode) -> Source | None: ...


def lower(node: PlanNode, cursor: Cursor, streams: UdfStreams) -> Relation:
    """The DuckDB relation that computes ``node``, built on ``cursor``. A subplan that two
    parts of the plan read comes from where the action keeps it, computed once."""
    kept = streams.spooled(node)
    if kept is not None:
        return scan(kept, cursor)
    if isinstance(node, UdfStep):
        return cursor.from_arrow(streams.udf_reader(node))
    inputs = [lower(child, cursor, streams) for child in node.inputs]
    try:
        if isinstance(node, Source):
            return scan(node, cursor)
        if isinstance(node, SqlStep):
            return apply(node, cursor, inputs)
    except Error as exc:
        for gone in (n.vanished() for n in walk(node) if isinstance(n, FileScan)):
            if gone is not None:  # another write replaced the files the plan was built on
                raise gone from exc
        error = SourceError if isinstance(node, Source) else ExecutionError
        raise error(f"step `{node.describe()}` failed: {duckdb_message(exc)}") from exc
    raise TypeError(f"cannot lower plan node {type(node).__name__}")
