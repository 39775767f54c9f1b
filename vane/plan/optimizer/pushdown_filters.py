"""Run a filter before a pass-through UDF step when it reads none of the step's outputs.

``Filter(p, Udf(X))`` becomes ``Udf(Filter(p, X))``: the model never sees rows the filter
drops. Sound because a pass-through step is row-wise (one output row per input row, input
columns carried unchanged), so filtering before or after keeps the same rows.
"""

from __future__ import annotations

from vane.errors import PlanError
from vane.plan.nodes import Filter, PlanNode, UdfStep


def pushdown_filters(node: PlanNode) -> PlanNode | None:
    if not (isinstance(node, Filter) and isinstance(node.input, UdfStep)):
        return None
    step = node.input
    if not step.udf.passthrough:
        return None  # its output is whatever the function returns: nothing to reason about
    try:
        # It binds against the step's input alone iff it reads none of the step's outputs.
        below = Filter(step.input, node.predicate)
    except PlanError:
        return None
    return UdfStep(below, step.udf, step.declared)
