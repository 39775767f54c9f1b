"""Expressions: a small immutable tree that plan steps hold instead of bare SQL strings.

Users build them with ``vane.col``, ``vane.lit`` and ``vane.sql_expr`` and Python operators::

    (col("price") * col("qty")).alias("total")
    (col("score") > 0.5) & col("label").is_not_null()

A node is a column reference, a literal, an operator or function applied to other nodes, a
cast, an alias, raw SQL text (the escape hatch, read with DuckDB's parser), or a call of a
column UDF on argument expressions. Expressions without UDF calls compile to DuckDB SQL with
every identifier quoted (``plan/sql.py``), so any column name works; an optimizer rule lifts UDF
calls into UDF steps before anything runs. ``display`` is the shorter text ``explain()`` and
messages show. A UDF call holds its function as a ``ColumnFunction``, what the plan needs of
it, so that expressions import nothing from ``vane.udf``.

An expression's output name follows Polars and Daft: an alias if it has one, else the name of
its left-most column (``col("x") + 1`` is ``x``), else ``literal``.
"""

from __future__ import annotations

import datetime as dt
import decimal
import enum
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, fields
from typing import Any, Protocol

import pyarrow as pa

from vane._arguments import CallArgument
from vane._sql import quote_ident, sql_list
from vane.errors import PlanError
from vane.ir.literals import check_literal, literal_sql
from vane.ir.parse import ParsedExpression, check_text, is_aggregate, parse_expression


class BinaryOperator(enum.Enum):
    """An operator of two operands; its value is how ``explain()`` writes it (a backend has its
    own spelling: ``plan/sql.py`` for DuckDB)."""

    ADD = "+"
    CONCAT = "||"
    SUB = "-"
    MUL = "*"
    TRUEDIV = "/"
    FLOORDIV = "//"
    MOD = "%"
    POW = "**"
    EQ = "="
    NE = "<>"
    LT = "<"
    LE = "<="
    GT = ">"
    GE = ">="
    AND = "AND"
    OR = "OR"


class UnaryOperator(enum.Enum):
    """An operator of one operand, and how ``explain()`` writes it."""

    NOT = "NOT"
    NEG = "-"
    IS_NULL = "IS NULL"
    IS_NOT_NULL = "IS NOT NULL"

    @property
    def postfix(self) -> bool:
        return self in (UnaryOperator.IS_NULL, UnaryOperator.IS_NOT_NULL)


LiteralValue = (
    None | bool | int | float | str | bytes | decimal.Decimal | dt.date | dt.datetime | dt.time
)


class Expr:
    """An expression over the columns of a relation. Immutable; every method returns a new one.

    >>> import vane
    >>> rel = vane.from_pydict({"price": [2.0, 3.0], "qty": [1, 4]})
    >>> rel.select((vane.col("price") * vane.col("qty")).alias("total")).to_pylist()
    [{'total': 2.0}, {'total': 12.0}]
    """

    __slots__ = ()

    # ---- what a node is made of (subclasses are frozen dataclasses) --------------------------

    @property
    def children(self) -> tuple[Expr, ...]:
        return tuple(
            value
            for f in fields(self)  # type: ignore[arg-type]
            for value in _as_exprs(getattr(self, f.name))
        )

    def walk(self) -> Iterator[Expr]:
        """This node and every node below it, parents first."""
        yield self
        for child in self.children:
            yield from child.walk()

    def map_children(self, fn: Callable[[Expr], Expr]) -> Expr:
        """A copy with ``fn`` applied to each direct child expression."""
        changes: dict[str, Any] = {}
        for f in fields(self):  # type: ignore[arg-type]
            value = getattr(self, f.name)
            if isinstance(value, Expr):
                changes[f.name] = fn(value)
            elif isinstance(value, tuple) and value and all(isinstance(v, Expr) for v in value):
                changes[f.name] = tuple(fn(v) for v in value)
        if not changes:
            return self
        return type(self)(**{f.name: getattr(self, f.name) for f in fields(self)} | changes)  # type: ignore[arg-type]

    @property
    def output_name(self) -> str:
        """The column name this expression produces in ``select``."""
        for node in self.walk():
            if isinstance(node, Alias):
                return node.name
            if isinstance(node, Column):
                return node.name
            if isinstance(node, SqlText):
                if node.parsed.alias:
                    return node.parsed.alias
                if node.parsed.columns:
                    return sorted(node.parsed.columns)[0]
            if isinstance(node, UdfCall) and not node.args:
                return node.udf.name
        return "literal"

    def columns(self) -> frozenset[str] | None:
        """The column names this expression reads (compare case-insensitively, as DuckDB
        does), or None when that cannot be known (raw SQL with ``*`` or a subquery)."""
        names: set[str] = set()
        for node in self.walk():
            if isinstance(node, Column):
                names.add(node.name)
            elif isinstance(node, SqlText):
                if node.parsed.columns is None:
                    return None
                names.update(node.parsed.columns)
        return frozenset(names)

    def is_row_local(self) -> bool:
        """Whether each row's value depends on that row alone (no aggregate, window function
        or subquery): only then may a filter run before the step that computes it."""
        for node in self.walk():
            if isinstance(node, FunctionCall) and is_aggregate(node.name):
                return False
            if isinstance(node, SqlText) and not node.parsed.row_local:
                return False
        return True

    def udf_calls(self) -> list[UdfCall]:
        """The UDF calls in this expression, innermost first."""
        return [node for node in reversed(list(self.walk())) if isinstance(node, UdfCall)]

    def has_udf_calls(self) -> bool:
        return any(isinstance(node, UdfCall) for node in self.walk())

    def __str__(self) -> str:
        return display(self)

    def __repr__(self) -> str:
        return f"<vane expression {self}>"

    # ---- building expressions ------------------------------------------------------------

    def alias(self, name: str) -> Expr:
        """The same values under another column name."""
        if not isinstance(name, str) or not name:
            raise PlanError(f"alias() takes a non-empty column name, got {name!r}")
        check_text(name, "alias()")
        inner = self.operand if isinstance(self, Alias) else self
        return Alias(inner, name)

    def cast(self, dtype: Any) -> Expr:
        """The values as another type: a DuckDB type name (``"BIGINT"``) or a pyarrow type.
        A value that does not convert is an error when the plan runs."""
        from vane.types import to_arrow_type

        return Cast(self, to_arrow_type(dtype))

    def is_null(self) -> Expr:
        return UnaryOp(UnaryOperator.IS_NULL, self)

    def is_not_null(self) -> Expr:
        return UnaryOp(UnaryOperator.IS_NOT_NULL, self)

    def isin(self, values: Sequence[Any]) -> Expr:
        """True where the value is one of ``values``."""
        if isinstance(values, (str, bytes)) or not isinstance(values, Sequence):
            raise PlanError(f"isin() takes a list of values, got {values!r}")
        return FunctionCall("list_contains", (Literal(list(values)), self))

    def fill_null(self, value: Any) -> Expr:
        return FunctionCall("coalesce", (self, _wrap(value)))

    def abs(self) -> Expr:
        return FunctionCall("abs", (self,))

    # Aggregates, for ``aggregate()``.
    def sum(self) -> Expr:
        return FunctionCall("sum", (self,))

    def mean(self) -> Expr:
        return FunctionCall("avg", (self,))

    def min(self) -> Expr:
        return FunctionCall("min", (self,))

    def max(self) -> Expr:
        return FunctionCall("max", (self,))

    def count(self) -> Expr:
        """The number of non-null values."""
        return FunctionCall("count", (self,))

    # ---- operators -------------------------------------------------------------------------

    def _binary(self, op: str, other: Any, *, reflected: bool = False) -> Expr:
        right = _wrap(other)
        if op == "add" and isinstance(other, str):
            op = "concat"  # col("name") + "!" joins text, as in Polars and Daft
        operator = BinaryOperator[op.upper()]
        return BinaryOp(operator, right, self) if reflected else BinaryOp(operator, self, right)

    def __add__(self, other: Any) -> Expr:
        return self._binary("add", other)

    def __radd__(self, other: Any) -> Expr:
        return self._binary("add", other, reflected=True)

    def __sub__(self, other: Any) -> Expr:
        return self._binary("sub", other)

    def __rsub__(self, other: Any) -> Expr:
        return self._binary("sub", other, reflected=True)

    def __mul__(self, other: Any) -> Expr:
        return self._binary("mul", other)

    def __rmul__(self, other: Any) -> Expr:
        return self._binary("mul", other, reflected=True)

    def __truediv__(self, other: Any) -> Expr:
        return self._binary("truediv", other)

    def __rtruediv__(self, other: Any) -> Expr:
        return self._binary("truediv", other, reflected=True)

    def __floordiv__(self, other: Any) -> Expr:
        return self._binary("floordiv", other)

    def __rfloordiv__(self, other: Any) -> Expr:
        return self._binary("floordiv", other, reflected=True)

    def __mod__(self, other: Any) -> Expr:
        return self._binary("mod", other)

    def __rmod__(self, other: Any) -> Expr:
        return self._binary("mod", other, reflected=True)

    def __pow__(self, other: Any) -> Expr:
        return self._binary("pow", other)

    def __rpow__(self, other: Any) -> Expr:
        return self._binary("pow", other, reflected=True)

    def __neg__(self) -> Expr:
        return UnaryOp(UnaryOperator.NEG, self)

    def __pos__(self) -> Expr:
        return self

    def __eq__(self, other: Any) -> Expr:  # type: ignore[override]
        return self._binary("eq", other)

    def __ne__(self, other: Any) -> Expr:  # type: ignore[override]
        return self._binary("ne", other)

    def __lt__(self, other: Any) -> Expr:
        return self._binary("lt", other)

    def __le__(self, other: Any) -> Expr:
        return self._binary("le", other)

    def __gt__(self, other: Any) -> Expr:
        return self._binary("gt", other)

    def __ge__(self, other: Any) -> Expr:
        return self._binary("ge", other)

    def __and__(self, other: Any) -> Expr:
        return self._binary("and", other)

    def __rand__(self, other: Any) -> Expr:
        return self._binary("and", other, reflected=True)

    def __or__(self, other: Any) -> Expr:
        return self._binary("or", other)

    def __ror__(self, other: Any) -> Expr:
        return self._binary("or", other, reflected=True)

    def __invert__(self) -> Expr:
        return UnaryOp(UnaryOperator.NOT, self)

    __hash__ = object.__hash__

    def __bool__(self) -> bool:
        raise PlanError(
            "an expression has no truth value until the plan runs: combine conditions with "
            "& (and), | (or) and ~ (not) instead of and/or/not, and compare with == inside "
            "filter(), not in an if statement"
        )


def _as_exprs(value: object) -> tuple[Expr, ...]:
    if isinstance(value, Expr):
        return (value,)
    if isinstance(value, tuple):
        return tuple(v for v in value if isinstance(v, Expr))
    return ()


def _wrap(value: Any) -> Expr:
    return value if isinstance(value, Expr) else Literal(value)


@dataclass(frozen=True, eq=False, repr=False)
class Column(Expr):
    name: str

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise PlanError(f"col() takes a non-empty column name, got {self.name!r}")
        check_text(self.name, "col()")


@dataclass(frozen=True, eq=False, repr=False)
class Literal(Expr):
    value: Any

    def __post_init__(self) -> None:
        check_literal(self.value)


@dataclass(frozen=True, eq=False, repr=False)
class BinaryOp(Expr):
    op: BinaryOperator
    left: Expr
    right: Expr


@dataclass(frozen=True, eq=False, repr=False)
class UnaryOp(Expr):
    op: UnaryOperator
    operand: Expr


@dataclass(frozen=True, eq=False, repr=False)
class FunctionCall(Expr):
    """A function, by the name a backend resolves (DuckDB's function names), applied to
    argument expressions."""

    name: str
    args: tuple[Expr, ...]


@dataclass(frozen=True, eq=False, repr=False)
class Cast(Expr):
    operand: Expr
    to: pa.DataType


@dataclass(frozen=True, eq=False, repr=False)
class Alias(Expr):
    operand: Expr
    name: str


@dataclass(frozen=True, eq=False, repr=False)
class SqlText(Expr):
    """Raw DuckDB SQL for one expression, read with DuckDB's parser when it is built."""

    text: str

    def __post_init__(self) -> None:
        if not isinstance(self.text, str) or not self.text.strip():
            raise PlanError(f"a SQL expression must be a non-empty string, got {self.text!r}")
        object.__setattr__(self, "_parsed", parse_expression(self.text))

    @property
    def parsed(self) -> ParsedExpression:  # set in __post_init__
        value: ParsedExpression = self.__dict__["_parsed"]
        return value


class ColumnFunction(Protocol):
    """What the plan needs of the column UDF a ``UdfCall`` calls (``vane.udf.column.ColumnUdf``,
    which the rule that lifts calls into UDF steps uses whole)."""

    @property
    def name(self) -> str: ...

    @property
    def return_type(self) -> pa.DataType:
        """The type of its values."""
        ...

    @property
    def error_column(self) -> str | None:
        """The column that keeps each failing row's error text (``on_error="null"``), if any."""
        ...


@dataclass(frozen=True, eq=False, repr=False)
class UdfCall(Expr):
    """A column UDF called on argument expressions; lifted into a UDF step before running.
    ``layout`` says, argument by argument, which argument expression or constant it passes."""

    udf: ColumnFunction
    args: tuple[Expr, ...]
    layout: tuple[CallArgument, ...] = ()


@dataclass(frozen=True, eq=False, repr=False)
class UdfErrorText(Expr):
    """The error text of the failing rows of the UDF call, in the same step, whose
    ``error_column`` is ``name`` (null where the call succeeded). The verbs add one next to each
    such call; lifting the call turns it into a reference to its step's error column."""

    name: str


def udf_error_columns(exprs: Sequence[Expr]) -> list[str]:
    """The error columns that UDF calls in ``exprs`` keep (``on_error="null"`` with an
    ``error_column``), in order, once each."""
    names: dict[int, str] = {}
    for expr in exprs:
        for call in expr.udf_calls():
            name = call.udf.error_column
            if name is not None:
                names.setdefault(id(call), name)
    return list(names.values())


# ---- text for explain() and messages ----------------------------------------------------

_PLAIN = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")  # shown unquoted by explain(); never parsed


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
    composite = _operation_text(expr, display)
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


def _operation_text(expr: Expr, render: Callable[[Expr], str]) -> str | None:
    """Operators, functions and casts as ``explain()`` shows them (in DuckDB's spelling, which
    is how users write SQL here); each caller passes how to render a child."""
    from vane.types import arrow_to_duckdb

    if isinstance(expr, BinaryOp):
        return f"({render(expr.left)} {expr.op.value} {render(expr.right)})"
    if isinstance(expr, UnaryOp):
        inner = render(expr.operand)
        op = expr.op.value
        return f"({inner} {op})" if expr.op.postfix else f"({op} {inner})"
    if isinstance(expr, FunctionCall):
        return f"{expr.name}({sql_list(render(a) for a in expr.args)})"
    if isinstance(expr, Cast):
        return f"CAST({render(expr.operand)} AS {arrow_to_duckdb(expr.to)})"
    return None


def col(name: str) -> Expr:
    """A reference to the column ``name`` (any name: it is quoted when compiled).

    >>> import vane
    >>> vane.from_pydict({"my col": [1, 2]}).filter(vane.col("my col") > 1).count()
    1
    """
    return Column(name)


def lit(value: Any) -> Expr:
    """A constant: a number, string, bytes, bool, None, date/time, decimal, or a list or dict
    of those. Each Python type has one SQL type, whatever the value: a float is a DOUBLE, an
    int a BIGINT, a Decimal a DECIMAL of its own digits (docs/expressions.md has the table).

    >>> import vane
    >>> vane.range(1).select(vane.lit(0.5).alias("x")).schema.field("x").type
    DataType(double)
    """
    return Literal(value)


def sql_expr(text: str) -> Expr:
    """One DuckDB SQL expression, usable wherever an expression is (``"x * 2"``,
    ``"hour(ts) AS h"``)."""
    return SqlText(text)


def as_expr(value: Any, columns: Sequence[str], where: str) -> Expr:
    """What a verb was given, as an expression: an ``Expr`` as it is; a string that is exactly
    the name of an input column, that column (so names with spaces or quotes work); any other
    string, SQL text."""
    if isinstance(value, Expr):
        return value
    if isinstance(value, str):
        if value in columns:
            return Column(value)
        if not value.strip():
            raise PlanError(
                f"{where}(): an expression must be a non-empty SQL string or vane.col()"
            )
        try:
            return SqlText(value)
        except PlanError as exc:
            raise PlanError(f"{where}(): {exc}") from None
    if callable(value) and not isinstance(value, type):
        raise PlanError(
            f"{where}(): got the function {getattr(value, '__name__', value)!r}, not an "
            "expression. Decorate it with @vane.func (and call it on columns, "
            "f(vane.col('x'))), or pass it to map_batches"
        )
    raise PlanError(
        f"{where}(): expected a column name, a SQL string or a vane expression (vane.col, "
        f"vane.lit), got {type(value).__name__} {value!r}"
    )
