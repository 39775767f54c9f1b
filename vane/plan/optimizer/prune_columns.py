"""Carry past each pass-through UDF step only the input columns that something above it uses.

Walking down from the action, each step says which of its input's columns it needs, given what
its consumer needs from it: a ``Select`` the columns its expressions read, a ``Filter`` those
plus its predicate's, a pass-through UDF step what passes through plus what it reads, and so
on; steps that need every column (``Distinct``, a join, raw SQL, an opaque ``map_batches``)
say so. Below a pass-through step that carries columns nobody needs, a ``Select`` drops them:
they then neither cross to the actors (a step ships only what it reads) nor ride along in
memory beside them. DuckDB prunes its own SQL; only UDF steps need this.

Names compare case-insensitively, as DuckDB binds them. Column sets come from expression trees
and, for SQL text, DuckDB's parser; an unknown set means "every column".
"""

from __future__ import annotations

from vane.ir.expr import Expr, col
from vane.plan.nodes import (
    Aggregate,
    Drop,
    Filter,
    Limit,
    OrderBy,
    PlanNode,
    Rename,
    Select,
    UdfStep,
    WithColumns,
)
from vane.plan.traverse import references, with_inputs

Needed = frozenset[str] | None  # lower-case names; None: every column


def prune_columns(plan: PlanNode) -> PlanNode:
    # A subplan two parents read may be needed differently by each: it keeps every column, and
    # is rewritten once (the runner computes it once).
    shared = {key for key, count in references(plan).items() if count > 1}
    return _prune(plan, None, shared, {})


def _reads(exprs: tuple[Expr, ...]) -> Needed:
    names: set[str] = set()
    for expr in exprs:
        columns = expr.columns()
        if columns is None:
            return None
        names.update(c.lower() for c in columns)
    return frozenset(names)


def _union(needed: Needed, more: Needed) -> Needed:
    return None if needed is None or more is None else needed | more


def _input_needs(node: PlanNode, needed: Needed) -> list[Needed]:
    """What each input of ``node`` must provide for ``node`` to provide ``needed``."""
    if isinstance(node, (Select, Aggregate)):
        return [_reads(node.expressions())]
    if isinstance(node, (Filter, OrderBy)):
        return [_union(needed, _reads(node.expressions()))]
    if isinstance(node, Limit):
        return [needed]
    if isinstance(node, WithColumns):
        if needed is None:
            return [None]
        added = {name.lower() for name, _ in node.items}
        return [_union(needed - added, _reads(node.expressions()))]
    if isinstance(node, Drop):
        if needed is None:
            dropped = {n.lower() for n in node.names}
            return [frozenset(n.lower() for n in node.input.schema.names) - dropped]
        return [needed]
    if isinstance(node, Rename):
        if needed is None:
            return [None]
        old_of = {new.lower(): old.lower() for old, new in node.mapping}
        return [frozenset(old_of.get(n, n) for n in needed)]
    if isinstance(node, UdfStep) and node.udf.passthrough and needed is not None:
        produced = {n.lower() for n in node.schema.names[len(node.input.schema) :]}
        reads = node.udf.reads if node.udf.reads is not None else node.input.schema.names
        return [(needed - produced) | {n.lower() for n in reads}]
    return [None] * len(node.inputs)  # joins, unions, distinct, raw SQL, opaque UDF steps


def _prune(node: PlanNode, needed: Needed, shared: set[int], done: dict[int, PlanNode]) -> PlanNode:
    if id(node) in shared:
        if id(node) in done:
            return done[id(node)]
        needed = None
    inputs = tuple(
        _prune(child, need, shared, done)
        for child, need in zip(node.inputs, _input_needs(node, needed), strict=True)
    )
    if isinstance(node, UdfStep) and node.udf.passthrough:
        (need,) = _input_needs(node, needed)
        names = inputs[0].schema.names
        keep = names if need is None else [n for n in names if n.lower() in need]
        if keep and len(keep) < len(names):
            inputs = (Select(inputs[0], tuple(col(n) for n in keep)),)
    result = node
    if any(new is not old for new, old in zip(inputs, node.inputs, strict=True)):
        result = _rebuilt(node, inputs)
    done[id(node)] = result
    return result


def _rebuilt(node: PlanNode, inputs: tuple[PlanNode, ...]) -> PlanNode:
    """``node`` over narrower inputs: a ``Drop`` or ``Rename`` of a column that is no longer
    there forgets it (and disappears when nothing is left)."""
    present = set(inputs[0].schema.names) if inputs else set()
    if isinstance(node, Drop):
        names = tuple(n for n in node.names if n in present)
        return Drop(inputs[0], names) if names else inputs[0]
    if isinstance(node, Rename):
        mapping = tuple((old, new) for old, new in node.mapping if old in present)
        return Rename(inputs[0], mapping) if mapping else inputs[0]
    return with_inputs(node, inputs)
