"""Merge two ``with_column`` steps that call the same UDF object into one, so that one
constructed object (one model load per actor, one actor pool) serves both.

``rel.with_column("a", model.embed(col("x"))).with_column("b", model.score(col("x")))`` is::

    WithColumn b = Model.score(x)                  WithColumn a = Model.embed(x),
      WithColumn a = Model.embed(x)         =>                b = Model.score(x)
        X                                            X

and ``lift_udf_calls`` then puts the calls of one ``@vane.cls`` instance (or of one
``@vane.func``) into one UDF step. The steps merge only when that changes nothing: the upper
step reads none of the columns the lower one computes and names none of them again (then each
expression sees the input it saw before, and the columns come out in the same order), and
neither calls a generator (whose step repeats each row per value).
"""

from __future__ import annotations

from vane.ir.expr import Expr
from vane.plan.nodes import PlanNode, WithColumns
from vane.plan.udf_steps import column_udf, step_key


def _udf_objects(exprs: tuple[Expr, ...]) -> set[int]:
    """What a step's UDF calls run on: the ``@vane.cls`` instance, or the function itself."""
    return {step_key(column_udf(call)) for expr in exprs for call in expr.udf_calls()}


def merge_shared_calls(node: PlanNode) -> PlanNode | None:
    if not isinstance(node, WithColumns) or not isinstance(node.input, WithColumns):
        return None
    lower = node.input
    if not _udf_objects(node.expressions()) & _udf_objects(lower.expressions()):
        return None
    if any(
        column_udf(c).is_generator
        for e in node.expressions() + lower.expressions()
        for c in e.udf_calls()
    ):
        return None  # a generator repeats its row per value: each keeps its own step

    produced = {name.lower() for name, _ in lower.items}
    if any(name.lower() in produced for name, _ in node.items):
        return None  # a column computed twice: the upper value must win, as it does now
    for expr in node.expressions():
        reads = expr.columns()
        if reads is None or any(name.lower() in produced for name in reads):
            return None  # it reads what the lower step computes (or cannot say)
    return WithColumns(lower.input, lower.items + node.items)
