"""The rows each UDF stage of an action will read, where that is certain before it starts: the
``total_rows`` of its ``StageStarted`` event, which the progress display turns into a bar, a
percentage and an ETA.

A stage's total is its input's size (``vane.plan.rows.known_rows``), and holds only when the
stage reads its input to the end: every reader above it does, up to the action (which is taken
to read everything: a caller who stops iterating early stops the stage short of its total).
A reader that may stop early makes the total unknown: a ``limit`` (except the one that caps a
step answering row for row, whose stage then reads exactly ``min(limit, input)`` rows), a join
(DuckDB skips one side when the other is empty), a SQL query (it may hold a LIMIT), and any
streaming step over one of these. Steps that read all their input before giving a row (a
sort, an aggregate, ``distinct``) read it to the end whoever reads them. A subplan read twice
is computed in full, once.
"""

from __future__ import annotations

from typing import Literal

from vane.plan.nodes import Aggregate, Distinct, Join, Limit, OrderBy, PlanNode, SqlQuery, UdfStep
from vane.plan.rows import answers_row_for_row, known_rows, one_for_one
from vane.plan.traverse import shared_subplans

# How far a node's rows are read: to the end; up to the first rows a `limit` keeps (through
# steps that keep each row as one); or maybe not to the end, at a point nobody knows.
Reading = Literal["all", "limited", "some"]
_RANK: dict[Reading, int] = {"some": 0, "limited": 1, "all": 2}


def stage_totals(plan: PlanNode, caps: dict[int, int]) -> dict[int, int]:
    """For each UDF step (by node identity) whose stage's input size is certain, that size.
    ``caps`` are the rows a `limit` needs from a step (``lowering.row_caps``)."""
    shared = shared_subplans(plan)
    reading: dict[int, Reading] = {}
    steps: dict[int, UdfStep] = {}

    def visit(node: PlanNode, how: Reading) -> None:
        if id(node) in shared:
            how = "all"  # computed in full, once, whoever reads it
        known = reading.get(id(node))
        if known is not None and _RANK[known] >= _RANK[how]:
            return
        reading[id(node)] = how
        if isinstance(node, UdfStep):
            steps[id(node)] = node
        for child in node.inputs:
            visit(child, _reading_of_input(node, how))

    visit(plan, "all")
    totals: dict[int, int] = {}
    for key, step in steps.items():
        size = known_rows(step.input)
        cap = caps.get(key)
        if size is None:
            continue
        if reading[key] == "all" and cap is None:
            totals[key] = size
        elif reading[key] == "limited" and cap is not None and answers_row_for_row(step.udf):
            totals[key] = min(cap, size)  # the stage reads no more of its input than that
    return totals


def _reading_of_input(node: PlanNode, how: Reading) -> Reading:
    """How far ``node``, itself read ``how`` far, reads its input."""
    if isinstance(node, (OrderBy, Aggregate, Distinct)):
        return "all"  # every row is in before the first goes out
    if isinstance(node, (Join, SqlQuery)):
        return "some"
    if isinstance(node, Limit):
        return "limited" if how == "all" else "some"
    if how == "limited" and one_for_one(node):
        return "limited"
    return how if how == "all" else "some"
