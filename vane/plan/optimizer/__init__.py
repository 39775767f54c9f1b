"""The optimizer: an ordered tuple of pure rules, each rewriting a whole plan into an equivalent
one, applied in order before every action.

Relational steps are DuckDB's to optimize (it sees each SQL segment whole); these rules turn
column UDF calls into UDF steps and move work across UDF steps, which DuckDB cannot see
through. A rule that looks at one node at a time (``PlanNode -> PlanNode | None``, None:
nothing to rewrite here) is applied bottom-up until it no longer applies, by ``bottom_up``.
"""

from __future__ import annotations

from collections.abc import Callable

from vane.plan.nodes import PlanNode
from vane.plan.optimizer.lift_udf_calls import lift_udf_calls
from vane.plan.optimizer.merge_shared_calls import merge_shared_calls
from vane.plan.optimizer.prune_columns import prune_columns
from vane.plan.optimizer.pushdown_filters import pushdown_filters
from vane.plan.traverse import with_inputs

LocalRule = Callable[[PlanNode], "PlanNode | None"]
Rule = Callable[[PlanNode], PlanNode]

# Each local rewrite moves a step strictly closer to the sources or removes a UDF call, so
# rewriting stops; the bound is a guard against a rule that breaks that promise.
_MAX_PASSES = 100


def bottom_up(rule: LocalRule) -> Rule:
    """``rule`` applied at every node, children first, until it applies nowhere."""

    def apply(node: PlanNode) -> PlanNode:
        for _ in range(_MAX_PASSES):
            rewritten = _pass(rule, node)
            if rewritten is node:
                return node
            node = rewritten
        raise AssertionError(f"optimizer rule {rule.__name__} did not reach a fixed point")

    apply.__name__ = rule.__name__
    return apply


def _pass(rule: LocalRule, node: PlanNode, done: dict[int, PlanNode] | None = None) -> PlanNode:
    """One bottom-up pass. ``done`` keeps one rewrite per node, so a subplan that two parents
    read stays one node (see ``traverse``)."""
    done = {} if done is None else done
    if id(node) in done:
        return done[id(node)]
    original = node
    inputs = tuple(_pass(rule, child, done) for child in node.inputs)
    if any(new is not old for new, old in zip(inputs, node.inputs, strict=True)):
        node = with_inputs(node, inputs)
    rewritten = rule(node)
    result = node if rewritten is None else rewritten
    done[id(original)] = result
    return result


RULES: tuple[Rule, ...] = (
    bottom_up(merge_shared_calls),
    bottom_up(lift_udf_calls),
    bottom_up(pushdown_filters),
    prune_columns,
)


def optimize(node: PlanNode) -> PlanNode:
    """The plan with every rule applied, in order."""
    for rule in RULES:
        node = rule(node)
    return node
