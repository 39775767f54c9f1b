"""Lowering a logical plan onto DuckDB: every node becomes a lazy ``DuckDBPyRelation`` on one
cursor. A UDF step becomes an Arrow stream that DuckDB reads lazily (``from_arrow``), fed by the
step's actor pool, which reads its own input on its own cursor. Nothing runs here; work starts
when the relation is read."""

from __future__ import annotations

from typing import Protocol

import duckdb
import pyarrow as pa

from vane._sql import duckdb_message
from vane.errors import ExecutionError, SourceError
from vane.plan.nodes import FileScan, Limit, PlanNode, Source, SqlStep, UdfStep
from vane.plan.rows import one_for_one
from vane.plan.traverse import shared_subplans, walk

Cursor = duckdb.DuckDBPyConnection


class Scannable(Protocol):
    """Rows kept or streamed for a node, which DuckDB reads instead of computing the node."""

    def to_duckdb(self, cursor: Cursor) -> duckdb.DuckDBPyRelation: ...


class UdfStreams(Protocol):
    def udf_reader(self, node: UdfStep) -> pa.RecordBatchReader: ...
    def spooled(self, node: PlanNode) -> Scannable | None: ...


def lower(node: PlanNode, cursor: Cursor, streams: UdfStreams) -> duckdb.DuckDBPyRelation:
    """The DuckDB relation that computes ``node``, built on ``cursor``. A subplan that two
    parts of the plan read comes from where the action keeps it, computed once."""
    scan = streams.spooled(node)
    if scan is not None:
        return scan.to_duckdb(cursor)
    if isinstance(node, UdfStep):
        return cursor.from_arrow(streams.udf_reader(node))
    inputs = [lower(child, cursor, streams) for child in node.inputs]
    try:
        if isinstance(node, Source):
            return node.to_duckdb(cursor)
        if isinstance(node, SqlStep):
            return node.apply(cursor, *inputs)
    except duckdb.Error as exc:
        for gone in (n.vanished() for n in walk(node) if isinstance(n, FileScan)):
            if gone is not None:  # another write replaced the files the plan was built on
                raise gone from exc
        error = SourceError if isinstance(node, Source) else ExecutionError
        raise error(f"step `{node.describe()}` failed: {duckdb_message(exc)}") from exc
    raise TypeError(f"cannot lower plan node {type(node).__name__}")


def row_caps(plan: PlanNode) -> dict[int, int]:
    """For each UDF step whose rows reach a ``limit`` one for one, the most rows the action needs
    from it (by node identity): the step's stream ends there.

    A reader asks for more than a limit keeps (DuckDB's scan pulls batches ahead), and rows
    nobody needs must not run up cost or raise. Between the limit and the step there may be
    steps that keep every row as it is (``drop``, ``rename``, ``select`` and ``with_column``
    of row-local expressions that do not ``unnest``); not a filter, and no subplan that
    another part of the plan reads too (that one is computed in full, once).
    """
    shared = shared_subplans(plan)
    caps: dict[int, int] = {}
    for node in walk(plan):
        if not isinstance(node, Limit):
            continue
        below = node.input
        while id(below) not in shared and one_for_one(below):
            below = below.inputs[0]
        if isinstance(below, UdfStep) and id(below) not in shared:
            needed = node.offset + node.n if node.n else 0
            caps[id(below)] = max(caps.get(id(below), 0), needed)
    return caps
