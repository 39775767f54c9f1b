"""Attached UDFs called inside SQL text (``vane.sql("SELECT shout(text) FROM r", r=rel)``).

DuckDB does not know these functions, and class UDFs must run in their actors, not inside
DuckDB. So each call is found with DuckDB's parser, turned into a ``UdfCall`` expression over
the one input table its arguments read, computed as a hidden column of that table (the
ordinary lifting rule then runs it in actors, shipping only its arguments), and the call's
text in the query, located by the parser, is replaced by that column. The query DuckDB runs
never sees the call; ``SELECT *`` never sees the hidden column.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

from vane import _engine
from vane._sql import quote_ident
from vane.errors import PlanError
from vane.ir.expr import Column, Expr, SqlText
from vane.ir.parse import check_query, serialize_sql, source_span, walk_tree
from vane.plan.nodes import PlanNode, SqlQuery, WithColumns

if TYPE_CHECKING:
    from vane.udf.column import ColumnUdf


def sql_query(
    query: str, named_inputs: tuple[tuple[str, PlanNode], ...], udfs: Mapping[str, ColumnUdf]
) -> SqlQuery:
    """The step for ``query`` over ``named_inputs``, with calls of ``udfs`` lifted out."""
    check_query(query, "sql()")  # before reading it for calls: one query statement
    calls = list(_calls(json.loads(serialize_sql(query)), udfs)) if udfs else []
    if not calls:
        return SqlQuery(query, named_inputs)
    inputs = dict(named_inputs)
    lookup = {name.lower(): name for name in inputs}
    hidden: dict[str, list[tuple[str, Expr]]] = {}
    taken = {c.lower() for node in inputs.values() for c in node.schema.names}
    edits: list[tuple[int, int, str]] = []
    for number, call in enumerate(calls):
        table = _table_of(call, inputs, lookup)
        name = _fresh(number, taken)
        hidden.setdefault(table, []).append((name, _expression(call, udfs, table, lookup)))
        edits.append((*source_span(query, call), quote_ident(name)))
    lowered = query
    for start, end, text in sorted(edits, reverse=True):
        lowered = lowered[:start] + text + lowered[end:]
    extended = tuple(
        (n, WithColumns(node, tuple(hidden[n])) if n in hidden else node)
        for n, node in named_inputs
    )
    names = tuple(name for items in hidden.values() for name, _ in items)
    return SqlQuery(query, extended, lowered=lowered, hidden=names)


def _fresh(number: int, taken: set[str]) -> str:
    while f"__vane_sql_{number}" in taken:
        number += 1000
    taken.add(f"__vane_sql_{number}")
    return f"__vane_sql_{number}"


def _is_call(node: dict[str, Any], udfs: Mapping[str, ColumnUdf]) -> bool:
    return node.get("class") == "FUNCTION" and node.get("function_name", "").lower() in udfs


def _calls(tree: Any, udfs: Mapping[str, ColumnUdf]) -> Iterator[dict[str, Any]]:
    """The outermost calls of attached UDFs (calls nested in their arguments come with them)."""
    if isinstance(tree, dict):
        if _is_call(tree, udfs):
            yield tree
            return
        for value in tree.values():
            yield from _calls(value, udfs)
    elif isinstance(tree, list):
        for value in tree:
            yield from _calls(value, udfs)


def _table_of(call: dict[str, Any], inputs: dict[str, PlanNode], lookup: dict[str, str]) -> str:
    """The one input table the call's arguments read, or a ``PlanError``."""
    name = call["function_name"]
    tables: set[str] = set()
    for node in walk_tree(call["arguments"]):
        if node.get("class") != "COLUMN_REF":
            continue
        parts = node["column_names"]
        if len(parts) >= 2 and parts[0].lower() in lookup:
            tables.add(lookup[parts[0].lower()])
            continue
        having = [t for t, n in inputs.items() if parts[0].lower() in _lower_names(n)]
        if len(having) > 1:
            raise PlanError(
                f"sql(): {name}() reads column {parts[0]!r}, which the tables "
                f"{', '.join(having)} all have; qualify it, such as {having[0]}.{parts[0]}"
            )
        if not having:
            raise PlanError(
                f"sql(): {name}() reads column {parts[0]!r}, which none of the tables "
                f"({', '.join(inputs)}) has; a UDF called from SQL reads the named tables"
            )
        tables.add(having[0])
    if len(tables) != 1:
        raise PlanError(
            f"sql(): the arguments of {name}() must read columns of exactly one of the tables "
            f"({', '.join(inputs)}); they read {sorted(tables) or 'none'}. Compute it per "
            "table, such as SELECT ... FROM (SELECT *, udf(x) AS y FROM t)"
        )
    return tables.pop()


def _lower_names(node: PlanNode) -> set[str]:
    return {n.lower() for n in node.schema.names}


def _expression(
    call: dict[str, Any], udfs: Mapping[str, ColumnUdf], table: str, lookup: dict[str, str]
) -> Expr:
    """The call as a ``UdfCall`` over ``table``'s own columns (qualifiers dropped)."""
    udf = udfs[call["function_name"].lower()]
    args = [_argument(entry["expression"], udfs, table, lookup) for entry in call["arguments"]]
    return udf(*args)


def _argument(
    node: dict[str, Any], udfs: Mapping[str, ColumnUdf], table: str, lookup: dict[str, str]
) -> Expr:
    if _is_call(node, udfs):
        return _expression(node, udfs, table, lookup)
    node = json.loads(json.dumps(node))  # a copy to de-qualify
    for ref in walk_tree(node):
        parts = ref.get("column_names") if ref.get("class") == "COLUMN_REF" else None
        if parts and len(parts) >= 2 and lookup.get(parts[0].lower()) == table:
            ref["column_names"] = parts[1:]
    if node.get("class") == "COLUMN_REF" and len(node["column_names"]) == 1:
        return Column(node["column_names"][0])  # shipped as it is, no copy computed first
    return SqlText(_render(node))


def _render(expression: dict[str, Any]) -> str:
    """One parsed expression back to SQL text, by DuckDB's own deserializer: put it in the
    parse tree of a one-item SELECT, and read the text back."""
    tree = json.loads(serialize_sql("SELECT 1"))
    tree["statements"][0]["node"]["select_list"] = [expression]
    with _engine.scratch() as cursor:
        rows = cursor.execute("SELECT json_deserialize_sql(?::JSON)", [json.dumps(tree)]).fetchall()
    text = str(rows[0][0])
    return text.removeprefix("SELECT ").strip()
