"""The optimizer: an ordered tuple of pure rules, each rewriting a plan into an equivalent one.

Relational steps are DuckDB's to optimize (it sees each SQL segment whole); these rules move
work across UDF steps, which DuckDB cannot see through. Each rule is one function,
``PlanNode -> PlanNode | None`` (None: nothing to rewrite at this node), in its own module.
"""

from __future__ import annotations

from collections.abc import Callable

from vane.plan.nodes import PlanNode
from vane.plan.optimizer.pushdown_filters import pushdown_filters
from vane.plan.optimizer.pushdown_projections import pushdown_projections
from vane.plan.traverse import with_inputs

Rule = Callable[[PlanNode], "PlanNode | None"]

RULES: tuple[Rule, ...] = (pushdown_filters, pushdown_projections)

# Each rewrite moves a step strictly closer to the sources, so rewriting stops; the bound
# is a guard against a rule that breaks that promise.
_MAX_PASSES = 100


def optimize(node: PlanNode) -> PlanNode:
    """The plan with every rule applied, bottom-up, until none applies."""
    for _ in range(_MAX_PASSES):
        rewritten = _pass(node)
        if rewritten is node:
            return node
        node = rewritten
    raise AssertionError("optimizer rules did not reach a fixed point")


def _pass(node: PlanNode) -> PlanNode:
    inputs = tuple(_pass(child) for child in node.inputs)
    if any(new is not old for new, old in zip(inputs, node.inputs, strict=True)):
        node = with_inputs(node, inputs)
    for rule in RULES:
        rewritten = rule(node)
        if rewritten is not None:
            return rewritten
    return node
