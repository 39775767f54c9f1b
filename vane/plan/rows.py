"""How many rows a step gives, when the plan alone says so, nothing run and no data read: the
totals of the progress display.

Only exact counts: a total that can be wrong is worse than none (a bar stuck at 40 % or run
past 100 %, an ETA that lies), so where a count is not certain it is None, never an estimate
or an upper bound. Sources that know their size (a range, an in-memory table, Parquet files
by their footers, a materialized result) give it; a step passes it on only when it keeps each
row as one row (``drop``, ``rename``, ``select`` and ``with_column`` of row-local expressions,
a sort, a column UDF or ``map`` that does not skip failing rows); a ``limit`` caps it; a filter,
a ``flat_map``, a ``map_batches`` (which may return any number of rows), a step with
``on_error="skip"``, a join, an aggregate or a SQL query make it unknown.
"""

from __future__ import annotations

from vane.ir.expr import Expr, FunctionCall, SqlText, display
from vane.ir.parse import gives_one_row
from vane.plan.nodes import (
    ArrowScan,
    Drop,
    FileScan,
    Limit,
    MaterializedScan,
    OrderBy,
    PlanNode,
    RangeScan,
    Rename,
    Select,
    UdfStep,
    Union,
    WithColumns,
)
from vane.udf.spec import UdfSpec


def one_for_one(node: PlanNode) -> bool:
    """Whether the SQL step ``node`` gives exactly one row for each input row, in order: a
    ``drop`` or ``rename``, or a ``select`` or ``with_column`` of row-local expressions whose
    every function gives one value a row (``gives_one_row``: not ``unnest``, ``unlist`` or a
    macro over them, such as ``generate_subscripts``)."""
    if isinstance(node, (Drop, Rename)):
        return True
    if isinstance(node, (Select, WithColumns)):
        return node.row_local and all(_one_row_each(e) for e in node.expressions())
    return False


def _one_row_each(expr: Expr) -> bool:
    for part in expr.walk():
        if isinstance(part, FunctionCall) and not gives_one_row(part.name):
            return False
        if isinstance(part, SqlText) and not all(map(gives_one_row, part.parsed.functions)):
            return False
    return "unnest" not in display(expr).lower()  # (however it is written)


def answers_row_for_row(spec: UdfSpec) -> bool:
    """Whether a UDF step answers each input row with exactly one output row, in order: a
    column UDF or ``map``, unless ``on_error="skip"`` drops the rows it fails on."""
    return spec.on_error != "skip" and (spec.kind == "row" or spec.passthrough)


def known_rows(node: PlanNode) -> int | None:
    """The rows ``node`` gives, when the plan says so exactly; None when it does not."""
    if isinstance(node, RangeScan):
        return max(node.n, 0)
    if isinstance(node, ArrowScan):
        return int(node.table.num_rows)
    if isinstance(node, MaterializedScan):
        return node.spool.rows
    if isinstance(node, FileScan):
        return node.rows
    if isinstance(node, Limit):
        below = known_rows(node.input)
        return None if below is None else max(0, min(node.n, below - node.offset))
    if isinstance(node, UdfStep):
        return known_rows(node.input) if answers_row_for_row(node.udf) else None
    if isinstance(node, OrderBy) or one_for_one(node):
        return known_rows(node.inputs[0])
    if isinstance(node, Union):
        left, right = known_rows(node.left), known_rows(node.right)
        return None if left is None or right is None else left + right
    return None
