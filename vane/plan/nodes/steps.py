"""SQL steps, which the backend computes: row-local steps (select, filter, with_columns, drop,
rename), and steps over all rows (limit, order_by, aggregate, distinct, union, join, SQL
queries)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

from vane._sql import sql_list
from vane.errors import PlanError
from vane.ir.expr import Alias, Column, Expr, SqlText, display
from vane.ir.parse import check_query
from vane.plan.nodes.base import JoinHow, PlanNode, check_columns

# SQL steps


class SqlStep(PlanNode):
    """A node whose output the backend computes from its inputs (``vane/backend/compile.py``)."""

    def expressions(self) -> tuple[Expr, ...]:
        """The expressions the step evaluates on its input's rows (for the optimizer)."""
        return ()

    def _derive_schema(self) -> None:
        """Bind the step against empty tables of its inputs' schemas: no data is read."""
        self._bind()

    def _input_columns(self) -> list[str]:
        return [name for node in self.inputs for name in node.schema.names]

    def columns_note(self) -> str:
        """ ". Input columns: a, b" for a message, or nothing for a step with no input (a query
        that reads files), which has no columns to list."""
        columns = self._input_columns()
        return f". Input columns: {', '.join(columns)}" if columns else ""


class _RowLocalStep(SqlStep):
    """A SQL step computed row by row: row-local unless an expression aggregates, uses a
    window or a subquery."""

    @property
    def row_local(self) -> bool:
        return all(expr.is_row_local() for expr in self.expressions())


def _need(step: str, what: str, values: Sequence[object]) -> None:
    if not values:
        raise PlanError(f"{step}() needs at least one {what}")


def _no_udf_calls(step: str, exprs: Sequence[Expr]) -> None:
    for expr in exprs:
        calls = expr.udf_calls()
        if calls:
            raise PlanError(
                f"{step}(): {calls[0].udf.name} is a UDF, and UDFs cannot run inside {step}: "
                "compute the column first with with_column(), then use it here"
            )


def _show_item(expr: Expr) -> str:
    """A select-list item as explain() shows it."""
    if isinstance(expr, (Column, Alias, SqlText)):
        return display(expr)
    return f"{display(expr)} AS {display(Column(expr.output_name))}"


@dataclass(frozen=True, eq=False)
class Select(_RowLocalStep):
    input: PlanNode
    exprs: tuple[Expr, ...]

    def __post_init__(self) -> None:
        _need("select", "expression", self.exprs)
        self._derive_schema()

    @property
    def inputs(self) -> tuple[PlanNode, ...]:
        return (self.input,)

    def expressions(self) -> tuple[Expr, ...]:
        return self.exprs

    def describe(self) -> str:
        return f"Select {sql_list(_show_item(e) for e in self.exprs)}"


@dataclass(frozen=True, eq=False)
class Filter(_RowLocalStep):
    input: PlanNode
    predicate: Expr

    def __post_init__(self) -> None:
        self._derive_schema()

    @property
    def inputs(self) -> tuple[PlanNode, ...]:
        return (self.input,)

    def expressions(self) -> tuple[Expr, ...]:
        return (self.predicate,)

    def describe(self) -> str:
        return f"Filter {display(self.predicate)}"


@dataclass(frozen=True, eq=False)
class WithColumns(_RowLocalStep):
    """Add columns computed from the input (all from the input as it was), or replace the
    columns of those names in place."""

    input: PlanNode
    items: tuple[tuple[str, Expr], ...]

    def __post_init__(self) -> None:
        _need("with_column", "column", self.items)
        names = [name for name, _ in self.items]
        for name in names:
            if not isinstance(name, str) or not name:
                raise PlanError(
                    f"with_column(): a column name must be a non-empty string, got {name!r}"
                )
        if len({n.lower() for n in names}) != len(names):
            raise PlanError(f"with_columns(): column names must be unique, got {names}")
        self._derive_schema()

    @property
    def inputs(self) -> tuple[PlanNode, ...]:
        return (self.input,)

    def expressions(self) -> tuple[Expr, ...]:
        return tuple(expr for _, expr in self.items)

    def describe(self) -> str:
        return "WithColumn " + sql_list(
            f"{display(Column(n))} = {display(e)}" for n, e in self.items
        )


@dataclass(frozen=True, eq=False)
class Drop(_RowLocalStep):
    input: PlanNode
    names: tuple[str, ...]

    def __post_init__(self) -> None:
        _need("drop", "column name", self.names)
        check_columns("drop", self.names, self.input)
        if len(set(self.names)) == len(self.input.schema):
            raise PlanError("drop(): this would drop every column; a relation needs at least one")
        self._derive_schema()

    @property
    def inputs(self) -> tuple[PlanNode, ...]:
        return (self.input,)

    def describe(self) -> str:
        return f"Drop {sql_list(self.names)}"


@dataclass(frozen=True, eq=False)
class Rename(_RowLocalStep):
    input: PlanNode
    mapping: tuple[tuple[str, str], ...]

    def __post_init__(self) -> None:
        if not self.mapping:
            raise PlanError("rename() needs a mapping such as {'old': 'new'}")
        for old, new in self.mapping:
            if not isinstance(new, str) or not new:
                raise PlanError(f"rename(): the new name for {old!r} must be a non-empty string")
        check_columns("rename", [old for old, _ in self.mapping], self.input)
        self._derive_schema()

    @property
    def inputs(self) -> tuple[PlanNode, ...]:
        return (self.input,)

    def describe(self) -> str:
        return "Rename " + ", ".join(f"{old} -> {new}" for old, new in self.mapping)


@dataclass(frozen=True, eq=False)
class Limit(SqlStep):
    input: PlanNode
    n: int
    offset: int = 0

    def __post_init__(self) -> None:
        for label, value in (("n", self.n), ("offset", self.offset)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise PlanError(f"limit(): {label} must be an integer >= 0, got {value!r}")
        self._set_schema(self.input.schema)

    @property
    def inputs(self) -> tuple[PlanNode, ...]:
        return (self.input,)

    def describe(self) -> str:
        return f"Limit {self.n}" + (f" offset {self.offset}" if self.offset else "")


@dataclass(frozen=True)
class SortKey:
    expr: Expr
    descending: bool = False
    nulls_first: bool | None = None  # None: DuckDB's default (nulls last)

    def describe(self) -> str:
        text = display(self.expr) + (" DESC" if self.descending else "")
        if self.nulls_first is not None:
            text += " NULLS FIRST" if self.nulls_first else " NULLS LAST"
        return text


@dataclass(frozen=True, eq=False)
class OrderBy(SqlStep):
    input: PlanNode
    keys: tuple[SortKey, ...]

    def __post_init__(self) -> None:
        _need("order_by", "sort key", self.keys)
        self._derive_schema()

    @property
    def inputs(self) -> tuple[PlanNode, ...]:
        return (self.input,)

    def expressions(self) -> tuple[Expr, ...]:
        return tuple(key.expr for key in self.keys)

    def describe(self) -> str:
        return f"OrderBy {sql_list(k.describe() for k in self.keys)}"


def group_key_name(expr: Expr) -> str:
    """A group key's column: its alias, or the column it is, or for an expression the text as
    written (``hour(ts)``), not DuckDB's rendering of it."""
    if isinstance(expr, SqlText):
        return expr.parsed.alias or " ".join(expr.parsed.text.split())
    return expr.output_name


@dataclass(frozen=True, eq=False)
class Aggregate(SqlStep):
    input: PlanNode
    aggs: tuple[Expr, ...]
    group_by: tuple[Expr, ...] = ()

    def __post_init__(self) -> None:
        _need("aggregate", "aggregate expression", self.aggs)
        _no_udf_calls("aggregate", self.aggs + self.group_by)
        self._derive_schema()

    @property
    def inputs(self) -> tuple[PlanNode, ...]:
        return (self.input,)

    def expressions(self) -> tuple[Expr, ...]:
        return self.aggs + self.group_by

    def describe(self) -> str:
        keys = f" by {sql_list(_show_key(k) for k in self.group_by)}" if self.group_by else ""
        return f"Aggregate {sql_list(_show_item(a) for a in self.aggs)}{keys}"


def _show_key(expr: Expr) -> str:
    return display(expr) if isinstance(expr, (Column, SqlText, Alias)) else _show_item(expr)


@dataclass(frozen=True, eq=False)
class Distinct(SqlStep):
    input: PlanNode

    def __post_init__(self) -> None:
        self._set_schema(self.input.schema)

    @property
    def inputs(self) -> tuple[PlanNode, ...]:
        return (self.input,)

    def describe(self) -> str:
        return "Distinct"


@dataclass(frozen=True, eq=False)
class Union(SqlStep):
    """All rows of both inputs (UNION ALL), columns matched by name, never by position."""

    left: PlanNode
    right: PlanNode

    def __post_init__(self) -> None:
        left, right = set(self.left.schema.names), set(self.right.schema.names)
        if left != right:
            raise PlanError(
                "union(): the inputs have different columns. Only on the left: "
                f"{sorted(left - right)}; only on the right: {sorted(right - left)}. "
                "Select or rename columns so both sides have the same names"
            )
        self._derive_schema()

    @property
    def inputs(self) -> tuple[PlanNode, ...]:
        return (self.left, self.right)

    def describe(self) -> str:
        return "Union"


@dataclass(frozen=True, eq=False)
class Join(SqlStep):
    """``on`` names key columns present on both sides (kept once); ``left_on``/``right_on`` pair
    key expressions, each evaluated on its own side (a column reference is that side's column;
    raw SQL text may name the sides ``l`` and ``r``). Other columns that exist on both sides
    get ``_right`` on the right's copy."""

    left: PlanNode
    right: PlanNode
    how: JoinHow
    on: tuple[str, ...] = ()
    left_on: tuple[Expr, ...] = ()
    right_on: tuple[Expr, ...] = ()

    HOWS: ClassVar[tuple[str, ...]] = ("inner", "left", "right", "outer", "semi", "anti")

    def __post_init__(self) -> None:
        if self.how not in self.HOWS:
            raise PlanError(f"join(): how={self.how!r} is not one of {', '.join(self.HOWS)}")
        if bool(self.on) == bool(self.left_on or self.right_on):
            raise PlanError(
                "join() needs either on='key' (or a list of keys present on both sides), or "
                "left_on= and right_on= with one expression each per key"
            )
        if self.on:
            check_columns("join (left side)", self.on, self.left)
            check_columns("join (right side)", self.on, self.right)
        elif len(self.left_on) != len(self.right_on):
            raise PlanError(
                f"join(): left_on has {len(self.left_on)} keys and right_on has "
                f"{len(self.right_on)}; give one right key per left key"
            )
        else:
            _no_udf_calls("join", [*self.left_on, *self.right_on])
            for side, keys, node in (
                ("left", self.left_on, self.left),
                ("right", self.right_on, self.right),
            ):
                check_columns(
                    f"join ({side} side)",
                    [k.name for k in keys if isinstance(k, Column)],
                    node,
                )
        self._derive_schema()

    @property
    def inputs(self) -> tuple[PlanNode, ...]:
        return (self.left, self.right)

    def describe(self) -> str:
        if self.on:
            keys = sql_list(self.on)
        else:
            keys = " AND ".join(
                f"{display(lk)} = {display(rk)}"
                for lk, rk in zip(self.left_on, self.right_on, strict=True)
            )
        return f"Join {self.how} on {keys}"


@dataclass(frozen=True, eq=False)
class SqlQuery(SqlStep):
    """A user's DuckDB SQL over named inputs (none: a source such as ``vane.sql("SELECT 1")``).
    It must be one query statement: building a plan never changes the database."""

    query: str
    named_inputs: tuple[tuple[str, PlanNode], ...] = ()
    # The text DuckDB runs when attached UDF calls were lifted out of ``query``
    # (``plan/sql_calls.py``), and the hidden columns that hold their results.
    lowered: str | None = None
    hidden: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not isinstance(self.query, str) or not self.query.strip():
            raise PlanError(f"sql() needs a query, got {self.query!r}")
        check_query(self.query, "sql()")
        names = [name for name, _ in self.named_inputs]
        for name in names:
            if not name.isidentifier():
                raise PlanError(f"sql(): table name {name!r} must be a plain identifier")
        if len({n.lower() for n in names}) != len(names):
            raise PlanError(f"sql(): table names must be unique, got {names}")
        self._derive_schema()

    @property
    def inputs(self) -> tuple[PlanNode, ...]:
        return tuple(node for _, node in self.named_inputs)

    def describe(self) -> str:
        names = ", ".join(name for name, _ in self.named_inputs)
        query = " ".join(self.query.split())
        return f"Sql [{names}] {query}" if names else f"Sql {query}"
