"""Lift column UDF calls out of expressions into pass-through UDF steps.

``WithColumns(sentiment = Classifier(review), X)`` becomes::

    Drop __vane_udf_0
      WithColumns(sentiment = __vane_udf_0)
        Udf Classifier(review) -> input + [__vane_udf_0]   (ships only `review` to the actors)
          X

A generator function's call yields several values per row: its step returns them as a list
per row, and a ``WithColumns`` right above unnests that list, so the row repeats once per value
(a row that yields nothing, or fails under ``on_error="null"``, stays as one row with a null, as
in Daft: no row is lost).

An argument that is an expression rather than a column is computed first into a hidden
column (a ``WithColumns`` below the step). Calls whose arguments hold other calls wait for
the next application of the rule, so nested calls lift innermost first. The calls of one step
that share a ``@vane.cls`` instance (or are the same ``@vane.func``) become one UDF step, so
one constructed object per actor serves them all. Hidden names are numbered from 0, skipping
names the input has, so ``explain(optimized=True)`` is deterministic.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

import pyarrow as pa

from vane._sql import quote_ident
from vane.errors import PlanError
from vane.ir.expr import Alias, Column, Expr, SqlText, UdfCall, UdfErrorText, display
from vane.plan.nodes import Drop, Filter, OrderBy, PlanNode, Select, UdfStep, WithColumns
from vane.plan.udf_steps import column_udf, step_key, step_options
from vane.types import arrow_to_duckdb, to_arrow_schema
from vane.udf.build import build_spec

if TYPE_CHECKING:
    from vane.udf.column import ColumnUdf
    from vane.udf.column_calls import CallPlan


class _Names:
    """Fresh hidden column names that clash with nothing the input has."""

    def __init__(self, taken: list[str]) -> None:
        self._taken = {n.lower() for n in taken}
        self._next = 0

    def fresh(self, kind: str) -> str:
        while True:
            name = f"__vane_{kind}_{self._next}"
            self._next += 1
            if name.lower() not in self._taken:
                self._taken.add(name.lower())
                return name


def _rewrite(expr: Expr, outputs: dict[int, str], errors: dict[str, str]) -> Expr:
    if isinstance(expr, UdfCall) and id(expr) in outputs:
        return Column(outputs[id(expr)])
    if isinstance(expr, UdfErrorText) and expr.name in errors:
        return Column(errors[expr.name])
    return expr.map_children(lambda child: _rewrite(child, outputs, errors))


def _rebuilt(
    node: PlanNode, below: PlanNode, outputs: dict[int, str], errors: dict[str, str]
) -> PlanNode:
    if isinstance(node, Select):
        exprs = []
        for expr in node.exprs:
            new = _rewrite(expr, outputs, errors)
            # Keep the column's name: a call is named after its first argument, a hidden
            # column after itself.
            if new is not expr and not isinstance(expr, Alias):
                new = Alias(new, expr.output_name)
            exprs.append(new)
        return Select(below, tuple(exprs))
    if isinstance(node, Filter):
        return Filter(below, _rewrite(node.predicate, outputs, errors))
    if isinstance(node, WithColumns):
        return WithColumns(below, tuple((n, _rewrite(e, outputs, errors)) for n, e in node.items))
    assert isinstance(node, OrderBy)
    keys = tuple(replace(k, expr=_rewrite(k.expr, outputs, errors)) for k in node.keys)
    return OrderBy(below, keys)


def lift_udf_calls(node: PlanNode) -> PlanNode | None:
    if not isinstance(node, (Select, Filter, WithColumns, OrderBy)):
        return None  # the only steps that admit UDF calls (Aggregate refuses them)
    calls = [call for expr in node.expressions() for call in expr.udf_calls()]
    # This round lifts the calls whose arguments are free of calls; the rest wait their turn.
    ready = list({id(c): c for c in calls if not any(a.has_udf_calls() for a in c.args)}.values())
    if not ready:
        return None
    # (loaded with the first column UDF call: a plan without one, as most are, needs none)
    from vane.udf.column_calls import CallPlan

    _check_generators(node, calls)
    below = node.inputs[0]
    by_lower = {n.lower(): n for n in below.schema.names}
    names = _Names(below.schema.names)
    hidden: list[str] = []
    computed: list[tuple[str, Expr]] = []  # argument expressions that are not plain columns
    outputs: dict[int, str] = {}
    groups: dict[int, list[tuple[UdfCall, CallPlan]]] = {}
    for call in ready:
        columns = []
        for arg in call.args:
            existing = by_lower.get(arg.name.lower()) if isinstance(arg, Column) else None
            if existing is None:
                existing = names.fresh("arg")
                computed.append((existing, arg))
            columns.append(existing)
        output = names.fresh("udf")
        outputs[id(call)] = output
        plan = CallPlan(column_udf(call), tuple(columns), call.layout, output, display(call))
        groups.setdefault(step_key(plan.udf), []).append((call, plan))
    if computed:
        below = WithColumns(below, tuple(computed))
        hidden.extend(name for name, _ in computed)
    errors: dict[str, str] = {}  # a kept error column's name -> its step's error column
    for group in groups.values():
        step = _udf_step(below, group, names)
        below = step
        hidden.extend(plan.output for _, plan in group)
        if step.udf.on_error == "null":
            hidden.append(step.udf.error_column)
            for call, _ in group:
                if call.udf.error_column is not None:
                    errors[call.udf.error_column] = step.udf.error_column
        for _, plan in group:
            if plan.udf.is_generator:
                below = WithColumns(below, ((plan.output, _unnest(plan.output, plan.udf)),))
    lifted = _rebuilt(node, below, outputs, errors)
    if isinstance(node, Select):
        return lifted  # it names what it keeps
    return Drop(lifted, tuple(n for n in hidden if n in lifted.schema.names))


def _udf_step(below: PlanNode, group: list[tuple[UdfCall, CallPlan]], names: _Names) -> UdfStep:
    plans = tuple(plan for _, plan in group)
    first = plans[0].udf
    from vane.udf.column_calls import AsyncColumnCalls, ColumnCalls

    runner = AsyncColumnCalls if any(plan.udf.is_async for plan in plans) else ColumnCalls
    reads = tuple(dict.fromkeys(c for plan in plans for c in plan.columns))
    label = ", ".join(f"{call.udf.name}({', '.join(plan.columns)})" for call, plan in group)
    spec = build_spec(
        "udf",
        runner,
        kind="batch",
        **step_options(first),
        cpus=None,
        memory=None,
        fn_constructor_args=(first.owner, plans),
        fn_constructor_kwargs=None,
        fn_kwargs=None,
        max_concurrency_per_actor=None,
        preserve_order=True,
        reads=reads,
        passthrough=True,
        label=label,
        error_column=first.options.error_column,
        hidden_error_column=names.fresh("error"),
    )
    declared = to_arrow_schema(
        {
            plan.output: pa.list_(plan.udf.return_type)
            if plan.udf.is_generator
            else plan.udf.return_type
            for plan in plans
        }
    )
    return UdfStep(below, spec, declared)


def _unnest(column: str, udf: ColumnUdf) -> Expr:
    """A generator call's list of values, one row per value; an empty or null list (nothing
    yielded, or the row failed under on_error="null") one row with a null."""
    name, element = quote_ident(column), arrow_to_duckdb(udf.return_type)
    return SqlText(
        f"unnest(CASE WHEN {name} IS NULL OR len({name}) = 0 THEN [NULL::{element}] "
        f"ELSE {name} END)"
    )


def _check_generators(node: Select | Filter | WithColumns | OrderBy, calls: list[UdfCall]) -> None:
    generators = [c for c in calls if column_udf(c).is_generator]
    if not generators:
        return
    name = generators[0].udf.name
    if isinstance(node, (Filter, OrderBy)):
        verb = "filter" if isinstance(node, Filter) else "order_by"
        raise PlanError(
            f"{verb}(): {name} is a generator UDF (several values per row); compute its column "
            "with with_column() first, then use the column here"
        )
    if len({id(c) for c in generators}) > 1:
        raise PlanError(
            f"one step calls two generator UDFs ({name} and {generators[1].udf.name}): each "
            "repeats the row per value, so compute them in two with_column() steps (every "
            "value of one with every value of the other)"
        )
    top = {id(e.operand if isinstance(e, Alias) else e) for e in node.expressions()}
    if any(id(g) not in top for g in generators):  # nested in another expression
        raise PlanError(
            f"{name} is a generator UDF (several values per row): use its call as a column of "
            "its own, not inside another expression"
        )
