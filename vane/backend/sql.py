"""Expressions -> DuckDB SQL text (the shorter text ``explain()`` shows is ``expr.display``).

Every identifier is quoted, so any column name works; every operator is parenthesized, so the
tree's shape is the evaluation order whatever SQL's precedence says. A UDF call has no SQL: the
optimizer lifts it into a UDF step first. To learn a step's schema before that, ``probe=True``
stands a typed NULL in for each call that still makes DuckDB bind its arguments, so a bad
argument column fails when the step is written.
"""

from __future__ import annotations

from vane._sql import quote_ident, sql_list
from vane.errors import PlanError
from vane.ir.expr import (
    Alias,
    BinaryOp,
    BinaryOperator,
    Cast,
    Column,
    Expr,
    FunctionCall,
    Literal,
    SqlText,
    UdfCall,
    UdfErrorText,
    UnaryOp,
    UnaryOperator,
    display,
)
from vane.ir.literals import literal_sql
from vane.types import arrow_to_duckdb

# DuckDB's spelling of each operator.
_BINARY = {
    BinaryOperator.ADD: "+",
    BinaryOperator.CONCAT: "||",
    BinaryOperator.SUB: "-",
    BinaryOperator.MUL: "*",
    BinaryOperator.TRUEDIV: "/",
    BinaryOperator.FLOORDIV: "//",
    BinaryOperator.MOD: "%",
    BinaryOperator.POW: "**",
    BinaryOperator.EQ: "=",
    BinaryOperator.NE: "<>",
    BinaryOperator.LT: "<",
    BinaryOperator.LE: "<=",
    BinaryOperator.GT: ">",
    BinaryOperator.GE: ">=",
    BinaryOperator.AND: "AND",
    BinaryOperator.OR: "OR",
}
_PREFIX = {UnaryOperator.NOT: "NOT", UnaryOperator.NEG: "-"}
_POSTFIX = {UnaryOperator.IS_NULL: "IS NULL", UnaryOperator.IS_NOT_NULL: "IS NOT NULL"}


def to_sql(expr: Expr, *, probe: bool = False, table: str | None = None) -> str:
    """The expression as DuckDB SQL (without its alias; see ``select_item``). ``table``
    qualifies its column references (a join's key, evaluated on one side); raw SQL text is
    left as the user wrote it."""

    def child(node: Expr) -> str:
        return to_sql(node, probe=probe, table=table)

    if isinstance(expr, Column):
        return quote_ident(expr.name) if table is None else f"{table}.{quote_ident(expr.name)}"
    if isinstance(expr, Literal):
        return literal_sql(expr.value)
    if isinstance(expr, BinaryOp):
        return f"({child(expr.left)} {_BINARY[expr.op]} {child(expr.right)})"
    if isinstance(expr, UnaryOp):
        if expr.op in _POSTFIX:
            return f"({child(expr.operand)} {_POSTFIX[expr.op]})"
        return f"({_PREFIX[expr.op]} {child(expr.operand)})"
    if isinstance(expr, FunctionCall):
        return f"{expr.name}({sql_list(child(a) for a in expr.args)})"
    if isinstance(expr, Cast):
        return f"CAST({child(expr.operand)} AS {arrow_to_duckdb(expr.to)})"
    if isinstance(expr, Alias):
        return child(expr.operand)
    if isinstance(expr, SqlText):
        return f"({expr.parsed.text})"
    if isinstance(expr, UdfCall):
        if not probe:
            raise PlanError(
                f"the UDF call {display(expr)} reached SQL without being lifted into a UDF step; "
                "this is a bug in vane's optimizer, please report it"
            )
        typed_null = f"CAST(NULL AS {arrow_to_duckdb(expr.udf.return_type)})"
        if not expr.args:
            return typed_null
        checks = " AND ".join(f"({child(a)}) IS NULL" for a in expr.args)
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
