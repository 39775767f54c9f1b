"""The relational verbs: each builds one plan node from the relation's plan (the node checks
itself and derives its schema) and returns a new relation over it."""

from __future__ import annotations

import difflib
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from vane._arguments import checked
from vane.errors import PlanError
from vane.ir.expr import Alias, Column, Expr, UdfErrorText, as_expr, col, udf_error_columns
from vane.ir.parse import parse_sort_key
from vane.plan import nodes
from vane.relation.base import RelationBase

if TYPE_CHECKING:
    from typing_extensions import Self  # typing.Self from Python 3.11

    from vane.plan.nodes import JoinHow


def _as_tuple(value: str | Sequence[str] | None, what: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str):
        return (value,)
    if isinstance(value, Sequence) and all(isinstance(v, str) for v in value):
        return tuple(value)
    raise PlanError(f"{what} must be a string or a list of strings, got {value!r}")


def _keys(
    value: str | Expr | Sequence[str | Expr] | None, what: str, columns: Sequence[str]
) -> tuple[Expr, ...]:
    """A join's key expressions on one side: a name of that side's columns is that column."""
    if value is None:
        return ()
    values = [value] if isinstance(value, (str, Expr)) else value
    if not isinstance(values, Sequence) or not all(isinstance(v, (str, Expr)) for v in values):
        raise PlanError(
            f"join(): {what} must be a column name, a SQL string, a vane expression or a list "
            f"of those, got {value!r}"
        )
    return tuple(as_expr(v, columns, "join") for v in values)


def _error_columns(exprs: Sequence[Expr], taken: Sequence[str], where: str) -> list[str]:
    """The columns UDF calls in ``exprs`` keep their errors in, each a new column of its own."""
    names = udf_error_columns(exprs)
    seen = {n.lower() for n in taken}
    for name in names:
        if name.lower() in seen:
            raise PlanError(
                f"{where}(): a UDF keeps its errors in error_column={name!r}, and the step "
                f"already has a column {name!r}; give the error column a name of its own"
            )
        seen.add(name.lower())
    return names


def _check_references(exprs: Sequence[Expr], columns: Sequence[str], where: str) -> None:
    """A ``vane.col`` that names no input column fails here, with the closest names (DuckDB's
    own message for a quoted name it cannot bind talks of aliases instead)."""
    known = {c.lower() for c in columns}
    for expr in exprs:
        for node in expr.walk():
            if isinstance(node, Column) and node.name.lower() not in known:
                close = difflib.get_close_matches(node.name, list(columns), n=3, cutoff=0.6)
                guess = f" (did you mean {' or '.join(map(repr, close))}?)" if close else ""
                raise PlanError(
                    f"{where}(): there is no column {node.name!r}{guess}. Input columns: "
                    f"{', '.join(columns)}"
                )


def _no_error_columns(exprs: Sequence[Expr], where: str) -> None:
    names = udf_error_columns(exprs)
    if names:
        raise PlanError(
            f"{where}(): a UDF with error_column={names[0]!r} adds a column, which {where} "
            "cannot; compute the UDF's column with with_column() first, then use it here"
        )


class RelationalVerbs(RelationBase):
    """select, filter, with_column(s), drop, rename, limit, order_by, join, aggregate,
    distinct, union and sql."""

    __slots__ = ()

    def __getitem__(self, name: str) -> Expr:
        """The column ``name`` as an expression: ``rel["review"]`` (checked now)."""
        if not isinstance(name, str) or name not in self.columns:
            raise PlanError(f"no column named {name!r}; the relation has {', '.join(self.columns)}")
        return col(name)

    def _exprs(self, values: Sequence[Any], where: str) -> tuple[Expr, ...]:
        exprs = tuple(as_expr(v, self.columns, where) for v in values)
        _check_references(exprs, self.columns, where)
        return exprs

    def select(self, *exprs: str | Expr) -> Self:
        """Keep or compute columns: names, SQL text or expressions, side by side:
        ``rel.select("id", "price * qty AS total", (vane.col("x") + 1).alias("y"))``.
        A string that is exactly a column's name is that column, whatever characters it has."""
        values = self._exprs(exprs, "select")
        errors = _error_columns(values, [e.output_name for e in values], "select")
        values += tuple(Alias(UdfErrorText(name), name) for name in errors)
        return self._derive(nodes.Select(self._plan, values))

    def filter(self, predicate: str | Expr) -> Self:
        """Keep the rows where a predicate holds: ``rel.filter("score > 0.5")`` or
        ``rel.filter(vane.col("score") > 0.5)``."""
        (expr,) = self._exprs([predicate], "filter")
        _no_error_columns([expr], "filter")
        return self._derive(nodes.Filter(self._plan, expr))

    def with_column(self, name: str, expr: str | Expr) -> Self:
        """Add a column computed by an expression (SQL text or a vane expression, a column UDF
        call included), or replace the column of that name in place."""
        return self.with_columns({name: expr})

    def with_columns(self, columns: Mapping[str, str | Expr]) -> Self:
        """Add or replace several columns at once; each is computed from the input as it was."""
        if not isinstance(columns, Mapping) or not columns:
            raise PlanError("with_columns() takes a non-empty dict of {name: expression}")
        items = tuple(
            (name, as_expr(e, self.columns, f"with_column({name!r})"))
            for name, e in columns.items()
        )
        _check_references([e for _, e in items], self.columns, "with_column")
        taken = [*self.columns, *(name for name, _ in items)]
        errors = _error_columns([e for _, e in items], taken, "with_column")
        items += tuple((name, UdfErrorText(name)) for name in errors)
        return self._derive(nodes.WithColumns(self._plan, items))

    def drop(self, *names: str) -> Self:
        return self._derive(nodes.Drop(self._plan, tuple(names)))

    def rename(self, mapping: Mapping[str, str]) -> Self:
        """Rename columns: ``rel.rename({"old": "new"})``."""
        if not isinstance(mapping, Mapping):
            raise PlanError("rename() takes a dict such as {'old': 'new'}")
        return self._derive(nodes.Rename(self._plan, tuple(mapping.items())))

    @checked
    def limit(self, n: int, offset: int = 0) -> Self:
        return self._derive(nodes.Limit(self._plan, n, offset))

    @checked
    def order_by(self, *keys: str | Expr, descending: bool | Sequence[bool] = False) -> Self:
        """Sort by keys: column names, SQL (``"score DESC"``, ``"ts NULLS FIRST"``) or
        expressions; ``descending`` applies to every key, or gives one flag per key."""
        flags = [descending] * len(keys) if isinstance(descending, bool) else list(descending)
        if len(flags) != len(keys):
            raise PlanError(
                f"order_by(): {len(keys)} key(s) and {len(flags)} descending flag(s); give one "
                "flag per key, or a single bool for all"
            )
        sort_keys = []
        for key, flag in zip(keys, flags, strict=True):
            if isinstance(key, str) and key not in self.columns:
                parsed = parse_sort_key(key)
                expr = as_expr(parsed.text, self.columns, "order_by")
                sort_keys.append(
                    nodes.SortKey(expr, parsed.descending != bool(flag), parsed.nulls_first)
                )
            else:
                (expr,) = self._exprs([key], "order_by")
                sort_keys.append(nodes.SortKey(expr, bool(flag)))
        _no_error_columns([k.expr for k in sort_keys], "order_by")
        return self._derive(nodes.OrderBy(self._plan, tuple(sort_keys)))

    @checked
    def join(
        self,
        other: Self,
        on: str | Sequence[str] | None = None,
        how: JoinHow = "inner",
        *,
        left_on: str | Expr | Sequence[str | Expr] | None = None,
        right_on: str | Expr | Sequence[str | Expr] | None = None,
    ) -> Self:
        """Join with another relation.

        ``on`` names key columns that both sides have (each appears once in the output);
        ``left_on``/``right_on`` pair key expressions instead, each evaluated on its own side: a
        column name or ``vane.col`` is that side's column (``left_on="id", right_on="id"`` works
        when both sides have ``id``), other SQL text may name the sides as the tables ``l`` and
        ``r``. Other columns that both sides have keep the left's name and get ``_right`` on the
        right's copy.
        ``how`` is one of inner, left, right, outer, semi, anti.
        """
        if not isinstance(other, RelationBase):
            raise PlanError(f"join() needs a vane Relation, got {type(other).__name__}")
        return self._derive(
            nodes.Join(
                self._plan,
                other._plan,
                how,
                _as_tuple(on, "on"),
                _keys(left_on, "left_on", self.columns),
                _keys(right_on, "right_on", other.columns),
            )
        )

    @checked
    def aggregate(
        self,
        *aggs: str | Expr,
        group_by: str | Expr | Sequence[str | Expr] | None = None,
    ) -> Self:
        """Aggregate, optionally per group; the group keys come first in the output.

        ``rel.aggregate("count(*) AS n", vane.col("score").mean().alias("mean"), group_by="label")``

        A group key is a column name, an expression, or SQL with an optional alias
        (``"hour(created_at) AS hr"``); an expression key without one is named by its text.
        """
        if group_by is None:
            keys: Sequence[Any] = ()
        elif isinstance(group_by, (str, Expr)):
            keys = [group_by]
        else:
            keys = list(group_by)
        return self._derive(
            nodes.Aggregate(
                self._plan, self._exprs(aggs, "aggregate"), self._exprs(keys, "group_by")
            )
        )

    def distinct(self) -> Self:
        return self._derive(nodes.Distinct(self._plan))

    def union(self, other: Self) -> Self:
        """All rows of both relations; columns are matched by name, never by position."""
        if not isinstance(other, RelationBase):
            raise PlanError(f"union() needs a vane Relation, got {type(other).__name__}")
        return self._derive(nodes.Union(self._plan, other._plan))

    def sql(self, query: str, name: str = "rel") -> Self:
        """Run DuckDB SQL in which this relation is the table ``name``.

        ``rel.sql("SELECT label, count(*) AS n FROM rel GROUP BY label")``
        """
        from vane.plan.sql_calls import sql_query
        from vane.udf.attached import attached

        return self._derive(sql_query(query, ((name, self._plan),), attached()))
