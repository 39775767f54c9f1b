"""Carry past a pass-through UDF step only the input columns that something after it uses.

``Select(cols, Udf(X))``, where ``cols`` are plain column names, keeps below the step only the
input columns in ``cols`` plus those the step reads; ``Drop(cols, Udf(X))`` drops below it the
input columns it names that the step does not read. Columns then neither cross to the actors
(a step ships only what it reads) nor ride along in memory beside them.
"""

from __future__ import annotations

import re

from vane._sql import quote_ident
from vane.plan.nodes import Drop, PlanNode, Select, UdfStep

_PLAIN = re.compile(r'^\s*(?:"((?:[^"]|"")+)"|([A-Za-z_][A-Za-z0-9_]*))\s*$')


def _plain_name(expr: str) -> str | None:
    match = _PLAIN.match(expr)
    if match is None:
        return None
    return match.group(1).replace('""', '"') if match.group(1) else match.group(2)


def pushdown_projections(node: PlanNode) -> PlanNode | None:
    if not (isinstance(node, (Select, Drop)) and isinstance(node.input, UdfStep)):
        return None
    step = node.input
    if not step.udf.passthrough:
        return None
    below = step.input
    names = below.schema.names
    reads = set(step.udf.reads if step.udf.reads is not None else names)
    if isinstance(node, Select):
        used = [_plain_name(e) for e in node.exprs]
        if any(name is None for name in used):
            return None  # an expression: which columns it uses is not known here
        needed = [n for n in names if n in used or n in reads]
    else:
        needed = [n for n in names if n not in node.names or n in reads]
    if len(needed) == len(names) or not needed:
        return None
    narrowed = Select(below, tuple(quote_ident(n) for n in needed))
    moved = UdfStep(narrowed, step.udf, step.declared)
    if isinstance(node, Select):
        return Select(moved, node.exprs)
    remaining = tuple(n for n in node.names if n in moved.schema.names)
    return Drop(moved, remaining) if remaining else moved
