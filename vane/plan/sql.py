"""Expressions -> DuckDB SQL text (the shorter text ``explain()`` shows is ``expr.display``).

Every identifier is quoted, so any column name works; every operator is parenthesized, so the
tree's shape is the evaluation order whatever SQL's precedence says. A UDF call has no SQL: the
optimizer lifts it into a UDF step first. To learn a step's schema before that, ``probe=True``
stands a typed NULL in for each call that still makes DuckDB bind its arguments, so a bad
argument column fails when the step is written.
"""

from __future__ import annotations

from vane._sql import quote_ident
from vane.errors import PlanError
from vane.ir.expr import (
    Alias,
    Column,
    Expr,
    Literal,
    SqlText,
    UdfCall,
    UdfErrorText,
    display,
    operation_text,
)
from vane.ir.literals import literal_sql


def to_sql(expr: Expr, *, probe: bool = False) -> str:
    """The expression as DuckDB SQL (without its alias; see ``select_item``)."""
    if isinstance(expr, Column):
        return quote_ident(expr.name)
    if isinstance(expr, Literal):
        return literal_sql(expr.value)
    composite = operation_text(expr, lambda child: to_sql(child, probe=probe))
    if composite is not None:
        return composite
    if isinstance(expr, Alias):
        return to_sql(expr.operand, probe=probe)
    if isinstance(expr, SqlText):
        return f"({expr.parsed.text})"
    if isinstance(expr, UdfCall):
        if not probe:
            raise PlanError(
                f"the UDF call {display(expr)} reached SQL without being lifted into a UDF step; "
                "this is a bug in vane's optimizer, please report it"
            )
        typed_null = f"CAST(NULL AS {expr.udf.type_name})"
        if not expr.args:
            return typed_null
        checks = " AND ".join(f"({to_sql(a, probe=True)}) IS NULL" for a in expr.args)
        return f"(CASE WHEN {checks} THEN {typed_null} ELSE {typed_null} END)"
    if isinstance(expr, UdfErrorText):
        if not probe:
            raise PlanError(
                f"the error column {expr.name!r} reached SQL without its UDF call being lifted "
                "into a UDF step; this is a bug in vane's optimizer, please report it"
            )
        return "CAST(NULL AS VARCHAR)"
    raise TypeError(f"cannot compile {type(expr).__name__}")


def select_item(expr: Expr, *, probe: bool = False) -> str:
    """``expr`` as one item of a select list, named by its output name. Raw SQL keeps the
    name DuckDB gives it unless the user wrote an alias."""
    if isinstance(expr, SqlText) and not expr.parsed.alias:
        return expr.parsed.text
    return f"{to_sql(expr, probe=probe)} AS {quote_ident(expr.output_name)}"
