"""Where an action may stop early: the rows each UDF step must produce for the limits above it.
(The lowering of a plan onto DuckDB is the backend's: ``vane/backend/lowering.py``.)"""

from __future__ import annotations

from vane.plan.nodes import Limit, PlanNode, UdfStep
from vane.plan.rows import one_for_one
from vane.plan.traverse import shared_subplans, walk


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
