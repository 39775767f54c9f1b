"""Expressions -> DuckDB SQL text, and the shorter text ``explain()`` shows.

Every identifier is quoted, so any column name works; every operator is parenthesized, so the
tree's shape is the evaluation order whatever SQL's precedence says. A UDF call has no SQL: the
optimizer lifts it into a UDF step first. To learn a step's schema before that, ``probe=True``
stands a typed NULL in for each call that still makes DuckDB bind its arguments, so a bad
argument column fails when the step is written.
"""

from __future__ import annotations

import datetime as dt
import decimal
import re
from collections.abc import Callable
from typing import Any

from vane._sql import quote_ident, quote_literal, sql_list
from vane.errors import PlanError
from vane.plan.expr import (
    Alias,
    BinaryOp,
    Cast,
    Column,
    Expr,
    FunctionCall,
    Literal,
    SqlText,
    UdfCall,
    UdfErrorText,
    UnaryOp,
    decimal_type,
)

_PLAIN = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")  # shown unquoted by explain(); never parsed


def to_sql(expr: Expr, *, probe: bool = False) -> str:
    """The expression as DuckDB SQL (without its alias; see ``select_item``)."""
    if isinstance(expr, Column):
        return quote_ident(expr.name)
    if isinstance(expr, Literal):
        return literal_sql(expr.value)
    composite = _composite(expr, lambda child: to_sql(child, probe=probe))
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


def _composite(expr: Expr, render: Callable[[Expr], str]) -> str | None:
    """Operators, functions and casts look the same in SQL and in explain(); only their
    leaves differ, so each caller passes how to render a child."""
    if isinstance(expr, BinaryOp):
        return f"({render(expr.left)} {expr.op} {render(expr.right)})"
    if isinstance(expr, UnaryOp):
        inner = render(expr.operand)
        return f"({inner} {expr.op})" if expr.op.startswith("IS") else f"({expr.op} {inner})"
    if isinstance(expr, FunctionCall):
        return f"{expr.name}({sql_list(render(a) for a in expr.args)})"
    if isinstance(expr, Cast):
        return f"CAST({render(expr.operand)} AS {expr.type_name})"
    return None


def select_item(expr: Expr, *, probe: bool = False) -> str:
    """``expr`` as one item of a select list, named by its output name. Raw SQL keeps the
    name DuckDB gives it unless the user wrote an alias."""
    if isinstance(expr, SqlText) and not expr.parsed.alias:
        return expr.parsed.text
    return f"{to_sql(expr, probe=probe)} AS {quote_ident(expr.output_name)}"


def literal_sql(value: Any) -> str:
    """A Python value as a SQL constant of one fixed type per Python type, whatever the value
    (``docs/expressions.md``): DuckDB would type a bare ``0.5`` as DECIMAL(2,1) and ``5`` as
    INTEGER but ``2**40`` as BIGINT. Numbers, dates and times are cast from their exact text,
    so the constant is the Python value itself (``-0.0``, NaN and 17-digit floats included).
    ``Literal`` has already refused the values that have no such type."""
    if value is None:
        return "NULL"
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    # int() and float(): an IntEnum or a numpy float64 is written as the number it is.
    if isinstance(value, int):
        return f"CAST({int(value)} AS BIGINT)"
    if isinstance(value, float):
        return f"CAST('{float(value)!r}' AS DOUBLE)"
    if isinstance(value, decimal.Decimal):
        precision, scale = decimal_type(value)
        return f"CAST('{value:f}' AS DECIMAL({precision}, {scale}))"
    if isinstance(value, str):
        # Untyped on purpose: VARCHAR alone, and read as the other side's type in a
        # comparison (col("day") > "2024-01-01" compares dates), as in Polars.
        return quote_literal(value)
    if isinstance(value, bytes):
        return "'" + "".join(f"\\x{b:02x}" for b in value) + "'::BLOB"
    if isinstance(value, dt.datetime):
        offset = value.utcoffset()
        if offset is None:
            return f"CAST('{value.isoformat(sep=' ')}' AS TIMESTAMP)"
        # The instant in UTC: DuckDB reads no offset finer than a second.
        utc = value.replace(tzinfo=None) - offset
        return f"CAST('{utc.isoformat(sep=' ')}+00' AS TIMESTAMPTZ)"
    if isinstance(value, dt.date):
        return f"CAST('{value.isoformat()}' AS DATE)"
    if isinstance(value, dt.time):
        return f"CAST('{value.isoformat()}' AS TIME)"
    if isinstance(value, dt.timedelta):
        # All in microseconds, not days: a timedelta's day is always 24 hours, an INTERVAL's
        # day is a calendar day (23 or 25 hours across a DST change).
        return f"TO_MICROSECONDS(CAST({value // dt.timedelta(microseconds=1)} AS BIGINT))"
    if isinstance(value, (list, tuple)):
        return "[" + sql_list(literal_sql(v) for v in value) + "]"
    if isinstance(value, dict):
        return (
            "{" + sql_list(f"{quote_literal(k)}: {literal_sql(v)}" for k, v in value.items()) + "}"
        )
    raise PlanError(f"{type(value).__name__} values cannot be SQL literals")


def display(expr: Expr) -> str:
    """Short, readable text for ``explain()`` and errors: plain names unquoted, raw SQL as the
    user wrote it, UDF calls as ``Name(args)``."""
    if isinstance(expr, Column):
        return expr.name if _PLAIN.fullmatch(expr.name) else quote_ident(expr.name)
    if isinstance(expr, Literal):
        if isinstance(expr.value, int) and not isinstance(expr.value, bool):
            return str(int(expr.value))  # the casts that fix their types are noise here
        if isinstance(expr.value, float):
            return repr(float(expr.value))
        return literal_sql(expr.value) if len(repr(expr.value)) <= 40 else "<literal>"
    composite = _composite(expr, display)
    if composite is not None:
        return composite
    if isinstance(expr, Alias):
        return f"{display(expr.operand)} AS {display(Column(expr.name))}"
    if isinstance(expr, SqlText):
        return " ".join(expr.text.split())
    if isinstance(expr, UdfCall):
        return f"{expr.udf.name}({sql_list(display(a) for a in expr.args)})"
    if isinstance(expr, UdfErrorText):
        return f"<errors of the call keeping {expr.name!r}>"
    raise TypeError(f"cannot display {type(expr).__name__}")
