"""Steps DuckDB computes: row-local steps (select, filter, with_columns, drop, rename), and
steps over all rows (limit, order_by, aggregate, distinct, union, join, SQL queries)."""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

import duckdb

from vane import _engine
from vane._sql import duckdb_message, quote_ident, sql_list
from vane.errors import PlanError
from vane.ir.expr import Alias, Column, Expr, SqlText, display
from vane.ir.parse import check_query, code_tokens
from vane.plan.nodes.base import Cursor, JoinHow, PlanNode, Relation, check_columns
from vane.plan.sql import select_item, to_sql

_serial = itertools.count()

# SQL steps


class SqlStep(PlanNode):
    """A node whose output DuckDB computes from its inputs' relations."""

    def apply(self, cursor: Cursor, *inputs: Relation, probe: bool = False) -> Relation:
        """The step on DuckDB relations of its inputs. ``probe=True`` only binds it to learn
        the schema: UDF calls still in its expressions stand as typed NULLs."""
        raise NotImplementedError

    def expressions(self) -> tuple[Expr, ...]:
        """The expressions the step evaluates on its input's rows (for the optimizer)."""
        return ()

    def _derive_schema(self) -> None:
        """Bind the step against empty tables of its inputs' schemas: no data is read."""
        with _engine.scratch() as cursor:
            try:
                empties = [cursor.from_arrow(node.schema.empty_table()) for node in self.inputs]
                self._check_udf_arguments(empties)
                relation = self.apply(cursor, *empties, probe=True)
                schema = relation.limit(0).to_arrow_table().schema
            except duckdb.Error as exc:
                fits = "does not fit its input" if self.inputs else "does not bind"
                raise PlanError(
                    f"step `{self.describe()}` {fits}: {duckdb_message(exc)}{self._columns_note()}"
                ) from exc
            finally:
                self._release(cursor)
        self._set_schema(schema)

    def _check_udf_arguments(self, empties: list[Relation]) -> None:
        """Bind each UDF call's arguments on their own first: a bad column then gets DuckDB's
        plain "not found" rather than a message about the call's output name."""
        for call in (c for e in self.expressions() for c in e.udf_calls()):
            try:
                empties[0].project(sql_list(to_sql(a, probe=True) for a in call.args)).limit(0)
            except duckdb.Error as exc:
                raise PlanError(
                    f"step `{self.describe()}`: the arguments of {call.udf.name} do not fit the "
                    f"input: {duckdb_message(exc)}{self._columns_note()}"
                ) from exc

    def _release(self, cursor: Cursor) -> None:
        """Drop whatever binding registered on the shared scratch cursor."""

    def _input_columns(self) -> list[str]:
        return [name for node in self.inputs for name in node.schema.names]

    def _columns_note(self) -> str:
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

    def apply(self, cursor: Cursor, *inputs: Relation, probe: bool = False) -> Relation:
        return inputs[0].project(sql_list(select_item(e, probe=probe) for e in self.exprs))

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

    def apply(self, cursor: Cursor, *inputs: Relation, probe: bool = False) -> Relation:
        return inputs[0].filter(to_sql(self.predicate, probe=probe))

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

    def apply(self, cursor: Cursor, *inputs: Relation, probe: bool = False) -> Relation:
        existing = {n.lower(): n for n in self.input.schema.names}
        replaced: list[str] = []
        added: list[str] = []
        for name, expr in self.items:
            target = existing.get(name.lower())
            item = f"{to_sql(expr, probe=probe)} AS {quote_ident(target or name)}"
            (replaced if target else added).append(item)
        star = f"* REPLACE ({sql_list(replaced)})" if replaced else "*"
        return inputs[0].project(sql_list([star, *added]))

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

    def apply(self, cursor: Cursor, *inputs: Relation, probe: bool = False) -> Relation:
        return inputs[0].project(f"* EXCLUDE ({sql_list([quote_ident(n) for n in self.names])})")

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

    def apply(self, cursor: Cursor, *inputs: Relation, probe: bool = False) -> Relation:
        renames = dict(self.mapping)
        exprs = [
            f"{quote_ident(n)} AS {quote_ident(renames[n])}" if n in renames else quote_ident(n)
            for n in self.input.schema.names
        ]
        return inputs[0].project(sql_list(exprs))

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

    def apply(self, cursor: Cursor, *inputs: Relation, probe: bool = False) -> Relation:
        return inputs[0].limit(self.n, self.offset)

    def describe(self) -> str:
        return f"Limit {self.n}" + (f" offset {self.offset}" if self.offset else "")


@dataclass(frozen=True)
class SortKey:
    expr: Expr
    descending: bool = False
    nulls_first: bool | None = None  # None: DuckDB's default (nulls last)

    def sql(self, *, probe: bool = False) -> str:
        text = to_sql(self.expr, probe=probe) + (" DESC" if self.descending else " ASC")
        if self.nulls_first is not None:
            text += " NULLS FIRST" if self.nulls_first else " NULLS LAST"
        return text

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

    def apply(self, cursor: Cursor, *inputs: Relation, probe: bool = False) -> Relation:
        return inputs[0].order(sql_list(k.sql(probe=probe) for k in self.keys))

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

    def apply(self, cursor: Cursor, *inputs: Relation, probe: bool = False) -> Relation:
        keys = [to_sql(k) for k in self.group_by]
        named = [
            f"{k} AS {quote_ident(group_key_name(e))}"
            for k, e in zip(keys, self.group_by, strict=True)
        ]
        return inputs[0].aggregate(
            sql_list(named + [select_item(a) for a in self.aggs]), sql_list(keys)
        )

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

    def apply(self, cursor: Cursor, *inputs: Relation, probe: bool = False) -> Relation:
        return inputs[0].distinct()

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

    def apply(self, cursor: Cursor, *inputs: Relation, probe: bool = False) -> Relation:
        # Columns are matched by name: the right side is projected into the left's order.
        ordered = inputs[1].project(sql_list([quote_ident(n) for n in self.left.schema.names]))
        return inputs[0].union(ordered)

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

    def apply(self, cursor: Cursor, *inputs: Relation, probe: bool = False) -> Relation:
        left, right = inputs[0].set_alias("l"), inputs[1].set_alias("r")
        if self.on:
            condition = " AND ".join(f"l.{quote_ident(k)} = r.{quote_ident(k)}" for k in self.on)
        else:
            condition = " AND ".join(
                f"{to_sql(lk, probe=probe, table='l')} = {to_sql(rk, probe=probe, table='r')}"
                for lk, rk in zip(self.left_on, self.right_on, strict=True)
            )
        joined = left.join(right, condition, how=self.how)
        if self.how in ("semi", "anti"):
            return joined
        left_names = self.left.schema.names
        exprs = []
        for name in left_names:
            if name in self.on and self.how in ("right", "outer"):
                exprs.append(
                    f"coalesce(l.{quote_ident(name)}, r.{quote_ident(name)}) AS {quote_ident(name)}"
                )
            else:
                exprs.append(f"l.{quote_ident(name)}")
        for name in self.right.schema.names:
            if name in self.on:
                continue
            alias = f"{name}_right" if name in left_names else name
            exprs.append(f"r.{quote_ident(name)} AS {quote_ident(alias)}")
        return joined.project(sql_list(exprs))

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
        object.__setattr__(self, "_probe_views", [])
        self._derive_schema()

    @property
    def inputs(self) -> tuple[PlanNode, ...]:
        return tuple(node for _, node in self.named_inputs)

    def apply(self, cursor: Cursor, *inputs: Relation, probe: bool = False) -> Relation:
        query = self.lowered or self.query
        if not inputs:
            return cursor.sql(query)
        # Each input is registered on this cursor under a name no other step uses, then exposed
        # to the query under the user's name as a CTE, which shadows any table of that name.
        ctes = []
        for (name, _), relation in zip(self.named_inputs, inputs, strict=True):
            internal = f"_vane_{next(_serial)}_{name}"
            cursor.register(internal, relation)
            if probe:
                self.__dict__["_probe_views"].append(internal)
            ctes.append(f"{quote_ident(name)} AS (FROM {internal})")
        relation = cursor.sql(_with_ctes(query, ctes))
        shown = [c for c in relation.columns if c in self.hidden]  # reached through `*`
        if shown:
            relation = relation.project(f"* EXCLUDE ({sql_list(quote_ident(c) for c in shown)})")
        return relation

    def _release(self, cursor: Cursor) -> None:
        views: list[str] = self.__dict__["_probe_views"]
        while views:
            cursor.unregister(views.pop())

    def describe(self) -> str:
        names = ", ".join(name for name, _ in self.named_inputs)
        query = " ".join(self.query.split())
        return f"Sql [{names}] {query}" if names else f"Sql {query}"


def _with_ctes(query: str, ctes: list[str]) -> str:
    """``query`` with ``ctes`` defined first: merged into its own WITH clause if it has one
    (found with DuckDB's tokenizer, so comments and letter case are no trouble)."""
    words = code_tokens(query)[:2]
    if words and words[0].word == "WITH":
        keyword = words[1] if len(words) > 1 and words[1].word == "RECURSIVE" else words[0]
        end = keyword.start + len(keyword.word)
        return f"{query[:end]} {sql_list(ctes)}, {query[end:]}"
    return f"WITH {sql_list(ctes)} {query}"
