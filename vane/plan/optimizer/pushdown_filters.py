"""Run a filter as early as the steps below it allow, so a model never sees rows a later
filter drops.

A filter moves below:
- a ``Select`` that passes every column it reads through unchanged (same name, no
  expression), when everything the select computes is row-local;
- a ``Drop`` (it cannot read what was dropped);
- a ``WithColumns`` whose new columns it does not read, when they are row-local;
- a pass-through UDF step whose outputs it does not read. Sound because such a step is
  row-wise (one output row per input row, input columns carried unchanged), so filtering
  before or after keeps the same rows.
Which columns a predicate reads comes from the expression tree (and DuckDB's parser for SQL
text); a predicate whose columns cannot be known stays where it is.
"""

from __future__ import annotations

from vane.errors import PlanError
from vane.ir.expr import Column
from vane.plan.nodes import Drop, Filter, PlanNode, Select, UdfStep, WithColumns


def pushdown_filters(node: PlanNode) -> PlanNode | None:
    if not isinstance(node, Filter):
        return None
    below = node.input
    if isinstance(below, Select):
        return _below_select(node, below)
    if isinstance(below, Drop):
        return Drop(Filter(below.input, node.predicate), below.names)
    if isinstance(below, WithColumns):
        reads = node.predicate.columns()
        added = {name.lower() for name, _ in below.items}
        if reads is None or {c.lower() for c in reads} & added or not below.row_local:
            return None
        return WithColumns(Filter(below.input, node.predicate), below.items)
    if isinstance(below, UdfStep) and below.udf.passthrough:
        try:
            # It binds against the step's input alone iff it reads none of the step's outputs.
            moved = Filter(below.input, node.predicate)
        except PlanError:
            return None
        return UdfStep(moved, below.udf, below.declared, step_id=below.step_id)
    return None


def _below_select(node: Filter, select: Select) -> PlanNode | None:
    reads = node.predicate.columns()
    if reads is None:
        return None
    kept = {
        e.name.lower()
        for e in select.exprs
        if isinstance(e, Column)  # passed through as it is, under its own name
    }
    # Fewer input rows would change a window function's or an aggregate's values: a filter
    # stays above a step that computes one.
    if not reads or any(c.lower() not in kept for c in reads) or not select.row_local:
        return None
    return Select(Filter(select.input, node.predicate), select.exprs)
